"""Window reductions in generated code: a sum or max over a few small axes of a large array.

Pooling reduces tiling windows: LeNet's max_pool2d is a max over axes (3, 5) of the
activation viewed as (N, C, H/2, 2, W/2, 2), and its backward counts the maxima of each
window with a sum over the same axes. The eager kernel (kiln/ops/reduce.py,
`window_reduce`) chains the ufunc over the window's slices in row-major order of the
reduced axes, ``((x0 + x1) + x2) + x3``; the loop here makes the same operations in the
same order for each output element, so its result equals eager's bit for bit. It runs
exactly where the eager kernel takes that path (`is_window`), on a compact input.

`window_geometry` lays the reduction out as the loops of its kernel (lower.lower_window).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ...ir import Node
from ....ops.reduce import windowed
from ....shaped import c_strides
from .elementwise_groups import offset_expression


def is_window(node: Node) -> bool:
    """Whether the eager kernel of this float reduction (a sum, a max: kiln/ops/reduce.py) reduces by
    chaining its elementwise `Reduction.combine` over window slices."""
    if node.prim.reduction is None or len(node.inputs) != 1:
        return False
    x = node.inputs[0]
    if x.dtype.name not in ("float32", "float64") or node.out.dtype.name != x.dtype.name:
        return False
    return windowed(tuple(x.shape), tuple(node.params.get("axes", ())))


def _kept(shape: tuple, strides: tuple, axes: tuple) -> list[tuple[int, int]]:
    """(size, element stride) of the kept dims, slowest first, adjacent dims laid out as one merged."""
    dims: list[list[int]] = []
    for d, (size, stride) in enumerate(zip(shape, strides)):
        if d in axes or size == 1:
            continue
        if dims and dims[-1][1] == stride * size:
            dims[-1] = [dims[-1][0] * size, stride]
        else:
            dims.append([size, stride])
    return [(size, stride) for size, stride in dims] or [(1, 0)]


@dataclass(frozen=True)
class WindowGeometry:
    """A window reduction as loops: output element (o, j) of an [outer, inner] space folds, in order, the input
    elements at ``row + j * step + offset`` for each of `offsets`, where `row` (an index expression over ``o``)
    is where row o's windows start."""

    outer: int
    inner: int
    step: int
    row: str
    offsets: tuple[int, ...]


def window_geometry(node: Node) -> WindowGeometry:
    """The loops of a window reduction (`is_window`) on a compact input, output C-ordered in the reduced shape:
    the kept dims (adjacent ones merged) are the rows and, fastest, the row's elements; the window's elements
    are taken in row-major order of the reduced axes, as the eager kernel chains them."""
    shape = tuple(node.inputs[0].shape)
    axes = tuple(node.params["axes"])
    strides = c_strides(shape)
    offsets = tuple(sum(i * strides[a] for a, i in zip(axes, combo))
                    for combo in itertools.product(*[range(shape[a]) for a in axes]))
    dims = _kept(shape, strides, axes)
    (inner, step), outer_dims = dims[-1], dims[:-1]
    row, _ = offset_expression("o", outer_dims[::-1])  # (fastest first)
    return WindowGeometry(math.prod(size for size, _ in outer_dims), inner, step, row, offsets)
