"""Fused kernels for plans with symbolic sizes (``dynamic_dims``, automatic dynamic dims).

A graph whose shapes hold symbolic sizes replays in Python (`python_plan`). Its elementwise
and row groups are found as in a static plan, on the sizes the trace saw (each symbolic size
carries its value at trace time), and each group is compiled once. The kernels are given their
loop sizes when called, and check on every call that this call's shapes fit what was compiled:
an elementwise kernel compares its inputs' index forms, a row kernel its reduced axes (which
must not be symbolic) and its inputs' forms. A call that does not fit evaluates the group node
by node with NumPy, so every size gives eager's bits.

Nodes whose params hold symbolic sizes (a reshape or an expand to a symbolic shape) stay out of
groups: that NumPy fallback needs plain params.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from ...ir import Graph
from ...symbolic import is_symbolic
from ....sizes import concrete
from .fuse_graph import fuse
from .rowcode import RowKernel


def _values(graph: Graph) -> list:
    return [*graph.inputs, *(node.out for node in graph.nodes)]


@contextmanager
def trace_sizes(graph: Graph) -> Iterator[None]:
    """Within the block, every value of `graph` has the plain shape the trace saw."""
    saved = [(v, v.shape) for v in _values(graph)]
    try:
        for v, shape in saved:
            if is_symbolic(shape):
                v.shape = tuple(concrete(d) for d in shape)
        yield
    finally:
        for v, shape in saved:
            v.shape = shape


def static_row_seeds(graph: Graph) -> set[int]:
    """The reductions whose reduced axes have plain sizes: the row groups a symbolic plan may fuse
    (their kernels run any number of rows)."""
    seeds = set()
    for node in graph.nodes:
        if node.prim.reduction is not None and node.inputs:
            shape = node.inputs[0].shape
            axes = node.params.get("axes", ())
            # (a 0-d input may name axis 0, as PyTorch allows: it has no size to be symbolic)
            if not is_symbolic(node.params) and not any(is_symbolic(shape[a]) for a in axes if a < len(shape)):
                seeds.add(id(node))
    return seeds


def fuse_symbolic(graph: Graph) -> Graph:
    """`fuse(graph)` for a graph with symbolic shapes: groups found at the trace's sizes, row kernels
    told that their row count may change between calls."""
    seeds = static_row_seeds(graph)
    with trace_sizes(graph):
        fused = fuse(graph, row_seeds=seeds)
    for node in fused.nodes:
        if isinstance(node.prim, RowKernel):
            node.prim.any_row_count = True
    return fused
