"""ConstantFold: evaluate nodes whose inputs are all baked literals, at compile time."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, InputSpec, Value
from ..symbolic import is_symbolic

MAX_FOLD_ELEMENTS = 64  # larger results stay as nodes, so plans don't carry big constants


class ConstantFold:
    """Replace literal-only subexpressions (e.g. ``2.0 * 0.5``) by their value."""

    name = "ConstantFold"

    def __call__(self, graph: Graph) -> Graph:
        literals = {v.id: s.literal for v, s in zip(graph.inputs, graph.specs) if s.literal is not None}
        folds: dict[int, np.ndarray] = {}
        for node in graph.nodes:
            if node.prim.is_random or is_symbolic(node.params):
                continue
            if not all(v.id in literals or v.id in folds for v in node.inputs):
                continue
            if int(np.prod([int(d) for d in node.out.shape])) > MAX_FOLD_ELEMENTS:
                continue
            args = [folds[v.id] if v.id in folds else literals[v.id] for v in node.inputs]
            params = node.params
            with np.errstate(all="ignore"):
                folds[node.out.id] = np.asarray(node.prim.kernel(np, *args, **params))
        if not folds:
            return graph
        out = graph.copy()
        rename: dict[int, Value] = {}
        for node in graph.nodes:
            if node.out.id in folds:
                lit = Value(node.out.shape, node.out.dtype, node.out.device)
                out.inputs.append(lit)
                out.specs.append(InputSpec("literal", None, literal=folds[node.out.id]))
                rename[node.out.id] = lit
        out.nodes = [n for n in out.nodes if n.out.id not in folds]
        for n in out.nodes:
            n.inputs = [rename.get(v.id, v) for v in n.inputs]
        out.outputs = [rename.get(v.id, v) for v in out.outputs]
        for w in out.state_writes:
            w.value = rename.get(w.value.id, w.value)
        return out
