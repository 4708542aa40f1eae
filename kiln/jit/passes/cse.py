"""CSE: common-subexpression elimination for pure primitives."""
from __future__ import annotations

from typing import Any

from ..ir import Graph, Value, param_key


def _literal_key(array: Any) -> tuple:
    """Equal baked literals (two separate ``2.0`` operands) count as the same operand."""
    return ("literal", str(array.dtype), tuple(array.shape), array.tobytes())


class CSE:
    """Replace a node by an earlier identical one (same op, inputs and params).

    Random nodes are never merged: two draws are different numbers. Two graph
    outputs are never merged into one value, because eager returns two separate
    tensors there, and mutating one must not change the other.
    """

    name = "CSE"

    def __call__(self, graph: Graph) -> Graph:
        out = graph.copy()
        literal_keys = {i: _literal_key(lit) for i, lit in out.literal_values().items()}
        outputs = {v.id for v in out.outputs}
        claimed = set(outputs)  # values already returned to the user as some output
        seen: dict[tuple, Value] = {}
        rename: dict[int, Value] = {}
        kept = []
        for node in out.nodes:
            node.rename_inputs(rename)
            if node.prim.is_random:
                kept.append(node)
                continue
            operands = tuple(literal_keys.get(v.id, v.id) for v in node.inputs)
            key = (node.prim.name, operands, param_key(node.params))
            prev = seen.get(key)
            if prev is None:
                seen[key] = node.out
                kept.append(node)
            elif node.out.id in outputs and prev.id in claimed:
                kept.append(node)  # both are returned: keep two buffers
            else:
                if node.out.id in outputs:
                    claimed.add(prev.id)
                rename[node.out.id] = prev
        if len(kept) == len(out.nodes):
            return graph
        out.nodes = kept
        out.rename_uses(rename)  # the outputs and state writes (kept nodes are renamed already)
        return out
