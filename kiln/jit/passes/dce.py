"""DeadNodeElim: drop nodes whose outputs reach no output or state write."""
from __future__ import annotations

from ..ir import Graph


class DeadNodeElim:
    """Reverse liveness from the outputs and state writes (nodes nothing live reads are dropped)."""

    name = "DeadNodeElim"

    def __call__(self, graph: Graph) -> Graph:
        live = {v.id for v in graph.live_roots()}
        kept: set[int] = set()
        for node in reversed(graph.nodes):
            if node.out.id in live:
                kept.add(node.out.id)
                live.update(v.id for v in node.inputs)
        if len(kept) == len(graph.nodes):
            return graph
        out = graph.copy()  # the result owns its nodes: later passes may edit them in place
        out.nodes = [n for n in out.nodes if n.out.id in kept]
        return out
