"""ConstantFold: evaluate nodes whose inputs are all baked literals, at compile time."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, InputSpec, Value, on_gpu
from ..symbolic import is_symbolic

MAX_FOLD_ELEMENTS = 64  # larger results stay as nodes, so plans don't carry big constants


class ConstantFold:
    """Replace literal-only subexpressions (e.g. ``2.0 * 0.5``) by their value.

    Graph outputs are never folded (nor the values they are views of): a folded
    output would hand every call the same array, so mutating one result in place
    would change the next call's result. Random nodes and effects (`is_check`: runtime
    checks, collectives) are never folded either: they must run on every call.
    """

    name = "ConstantFold"

    def __call__(self, graph: Graph) -> Graph:
        literals = graph.literal_values()
        protected = _returned_memory(graph)
        folds: dict[int, np.ndarray] = {}
        for node in graph.nodes:
            if node.prim.is_random or node.prim.is_check or node.out.id in protected or is_symbolic(node.params):
                continue
            if not all(v.id in literals or v.id in folds for v in node.inputs):
                continue
            if is_symbolic(node.out.shape) or int(np.prod([int(d) for d in node.out.shape])) > MAX_FOLD_ELEMENTS:
                continue
            args = [folds[v.id] if v.id in folds else literals[v.id] for v in node.inputs]
            if any(on_gpu(a) for a in args):  # folds run NumPy kernels; a GPU plan's literals stay
                continue
            with np.errstate(all="ignore"):
                value = np.asarray(node.prim.kernel(np, *args, **node.params))
            folds[node.out.id] = value.astype(node.out.dtype.np, copy=False)
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
        out.rename_uses(rename)
        return out


def _returned_memory(graph: Graph) -> set[int]:
    """Ids of the outputs and of every value an output may be a view of."""
    producers = graph.producers()
    protected: set[int] = set()
    stack = [v.id for v in graph.outputs]
    while stack:
        vid = stack.pop()
        if vid in protected:
            continue
        protected.add(vid)
        node = producers.get(vid)
        if node is not None and node.prim.is_view and node.inputs:
            stack.append(node.inputs[0].id)
    return protected
