"""Which memory layout eager NumPy gives each value of a graph, and which runtime arrays keep fused code exact.

Generated kernels write C-ordered outputs. Eager NumPy lays a result out after its
operands (order "K"), so a permuted input gives an F-ordered result. Values are the same
either way, but a later NumPy reduction adds the elements of a differently ordered array
in a different order, and rounds differently. So a fused group must only stand in for
values eager would also lay out in C order, and must sum rows only where NumPy sums
them pairwise.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...ir import Graph
from ..render import C


def eager_layouts(graph: Graph) -> dict[int, str]:
    """How eager NumPy lays out each node's value: "C" (C-ordered: contiguous, or a view whose
    strides decrease, such as a slice), "bcast" (a broadcast view) or "other" (F-ordered,
    reversed or unknown), taking the graph's inputs to be C-ordered (kernels check theirs at
    run time, see c_ordered).

    Ufunc and where results are C-ordered unless an operand is "other" (NumPy follows its
    operands' order; broadcast operands give none); astype keeps its operand's order and turns
    a row-broadcast view into F order; expand gives a broadcast view; basic indexing with
    positive steps and reshape keep C order; advanced indexing copies, in C order when its
    index arrays lead (``x[idx]``, ``x[i, j, ...]``: an embedding lookup) and otherwise in an
    order of its own (``x[:, idx]`` puts the indexed dims first, then transposes); permute,
    flip and negative steps give "other"; other kernels return new C-ordered arrays.
    """
    layouts: dict[int, str] = {}
    for n in graph.nodes:
        name = n.prim.name
        first = layouts.get(n.inputs[0].id, "C") if n.inputs else "C"
        if n.prim.broadcast:
            layout = "bcast"
        elif name == "index":
            spec = n.params.get("spec", ())
            basic = all(e[0] != "t" and not (e[0] == "s" and e[3] is not None and e[3] < 0) for e in spec)
            layout = "C" if basic and first == "C" or _leading_gather(spec) else "other"
        elif n.prim.result_layout == "c":  # a copy (np.array(x, order="C")), a matmul, a convolution
            layout = "C"
        elif n.prim.identity or name == "cast" or n.prim.is_check:
            layout = "C" if first == "C" else "other"
        elif n.prim.is_view:  # permute, flip, and any view kiln adds later
            layout = "other"
        elif C.template(n.prim) is not None:  # elementwise: the C renderer spells it
            layout = "other" if any(layouts.get(v.id, "C") == "other" for v in n.inputs) else "C"
        else:
            layout = "C"
        layouts[n.out.id] = layout
    return layouts


def _leading_gather(spec: tuple) -> bool:
    """Whether an index spec is index arrays followed only by whole slices (or an Ellipsis)."""
    k = 0
    while k < len(spec) and spec[k][0] == "t":
        k += 1
    return k > 0 and all(e[0] == "e" or e == ("s", None, None, None) for e in spec[k:])


def c_ordered(a: Any) -> bool:
    """Whether eager NumPy treats `a` as C-ordered: C-contiguous, or a strided view whose strides
    still decrease (a slice), with no broadcast (zero) or negative strides."""
    if a.__class__ is not np.ndarray:
        return True  # a NumPy scalar
    if a.flags.c_contiguous:
        return True
    strides = [s for d, s in zip(a.shape, a.strides) if d != 1]
    return all(s > 0 for s in strides) and all(x > y for x, y in zip(strides, strides[1:]))
