"""CSE: common-subexpression elimination for pure primitives."""
from __future__ import annotations

from ..ir import Graph, param_key


class CSE:
    """Replace a node by an earlier identical one (same op, inputs and params)."""

    name = "CSE"

    def __call__(self, graph: Graph) -> Graph:
        out = graph.copy()
        seen: dict[tuple, object] = {}
        rename: dict[int, object] = {}
        kept = []
        for node in out.nodes:
            node.inputs = [rename.get(v.id, v) for v in node.inputs]
            if node.prim.is_random:
                kept.append(node)
                continue
            key = (node.prim.name, tuple(v.id for v in node.inputs), param_key(node.params))
            prev = seen.get(key)
            if prev is None:
                seen[key] = node.out
                kept.append(node)
            else:
                rename[node.out.id] = prev
        if len(kept) == len(out.nodes):
            return graph
        out.nodes = kept
        out.outputs = [rename.get(v.id, v) for v in out.outputs]
        for w in out.state_writes:
            w.value = rename.get(w.value.id, w.value)
        return out
