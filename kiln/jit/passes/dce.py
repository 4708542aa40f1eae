"""DeadNodeElim: drop nodes whose outputs reach no output, state write or runtime check."""
from __future__ import annotations

from ..ir import Graph


class DeadNodeElim:
    """Reverse liveness from the outputs and state writes (nodes nothing live reads are dropped).

    Runtime checks (`prim.is_check`: an index range, a zero divisor) are roots too: eager
    raises on bad data even when the checked op's result goes unused, so the plan must.
    """

    name = "DeadNodeElim"

    def __call__(self, graph: Graph) -> Graph:
        live = {v.id for v in graph.live_roots()}
        kept: set[int] = set()
        for node in reversed(graph.nodes):
            if node.out.id in live or getattr(node.prim, "is_check", False):
                kept.add(node.out.id)
                live.update(v.id for v in node.inputs)
        if len(kept) == len(graph.nodes):
            return graph
        out = graph.copy()  # the result owns its nodes: later passes may edit them in place
        out.nodes = [n for n in out.nodes if n.out.id in kept]
        return out
