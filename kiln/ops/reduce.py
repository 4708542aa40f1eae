"""Reduction primitives: sum, max, argmax and cumsum over normalized axes."""
from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from ..dtypes import int64
from .elementwise import F
from .primitive import AbstractValue, Primitive, Reduction, ShapeError, array_vjp
from .quiet import quiet


def reduced_shape(shape: tuple, axes: tuple, keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _array_axes(x, axes: tuple) -> tuple:
    """The axes to hand NumPy: a 0-d tensor accepts dim 0 / -1 (as PyTorch) but has no axis to reduce."""
    return axes if x.ndim else ()


def _check_axes(op: str, shape: tuple, axes: tuple) -> None:
    for a in axes:
        if not 0 <= a < max(len(shape), 1):
            raise ShapeError(f"{op}: axis {a} is out of range for a tensor of shape {tuple(shape)}")


_WINDOW_LIMIT = 16  # reduce at most this many elements per output by elementwise chaining


def windowed(shape: tuple, axes: tuple) -> bool:
    """Whether `window_reduce` reduces an array of `shape` over `axes` (generated code that must equal
    it asks the same question: kiln/jit/backends/cpu/windows.py)."""
    if not shape:
        return False
    count = math.prod(shape[a] for a in axes)
    return 2 <= count <= _WINDOW_LIMIT and len(axes) != len(shape) and math.prod(shape) >= 4096 * count


def window_slices(shape: tuple, axes: tuple) -> list[tuple]:
    """The index of each window slice: one position on every window axis, whole elsewhere, in
    row-major order of the positions (the order `window_reduce` combines them in)."""
    slices = []
    for combo in itertools.product(*[range(shape[a]) for a in axes]):
        index: list[Any] = [slice(None)] * len(shape)
        for a, i in zip(axes, combo):
            index[a] = i
        slices.append(tuple(index))
    return slices


def window_reduce(xp: Any, ufunc: Any, x: Any, axes: tuple, keepdims: bool) -> Any:
    """Reduce a few small axes of a large (often strided) array by chaining `ufunc` over slices.

    NumPy's generic reduction over several non-contiguous axes is slow (pooling windows of
    an unfold2d view: ~30x slower); combining the k*k window slices elementwise is fast.
    Returns None when the generic reduction is the better choice.
    """
    if not windowed(tuple(x.shape), tuple(axes)):
        return None
    out = None
    for index in window_slices(tuple(x.shape), axes):
        part = x[index]
        out = part.copy() if out is None else ufunc(out, part, out=out)
    if keepdims:
        out = out.reshape(reduced_shape(x.shape, axes, True))
    return out


@quiet
def window_max_grad(g: Any, x: Any, out: Any, axes: tuple) -> Any:
    """`Max`'s VJP for a `windowed` max, slice by slice as `window_reduce` computed it.

    The decomposed VJP (``mask = x == max``, ``count = sum(mask)``, ``mask * (g / count)``)
    broadcasts over the few window axes, which NumPy runs with inner loops as short as the
    window (2 elements for a 2x2 pool). The same operations on each window slice give the
    same values (counts of ones are exact in any order), laid out like `x`, as NumPy lays
    out the decomposed product.
    """
    kept = reduced_shape(x.shape, axes, False)
    peak = out.reshape(kept)
    slices = window_slices(tuple(x.shape), axes)
    masks = [(x[index] == peak).astype(x.dtype) for index in slices]
    count = masks[0].copy()
    for mask in masks[1:]:
        count += mask
    share = g.reshape(kept) / count
    grad = np.empty_like(x)
    for index, mask in zip(slices, masks):
        np.multiply(mask, share, out=grad[index])
    return grad


def _leading_sum_on_gpu(xp: Any, x: Any, axes: tuple, keepdims: bool) -> Any:
    """A float32/float64 sum over the leading axes of a C-ordered GPU array (a bias or LayerNorm weight
    gradient) as a product with a row of ones, one cuBLAS call; None for anything else.

    CuPy's own reduction reads such columns slowly: about 380 us a call for the (16384, 768 to 3072)
    gradients of the GPU check's transformer on an H200, where reading their bytes takes 10-50 us. Not yet
    measured on a GPU this way. The order of the additions differs from the CPU's, as any GPU sum's does."""
    rank = x.ndim
    if rank < 2 or x.dtype.name not in ("float32", "float64") or not x.flags.c_contiguous or x.size == 0:
        return None
    lead = len(axes)
    if not 0 < lead < rank or tuple(sorted(a % rank for a in axes)) != tuple(range(lead)):
        return None
    rows = math.prod(x.shape[:lead])
    summed = xp.matmul(xp.ones((1, rows), x.dtype), x.reshape(rows, -1))
    return summed.reshape(((1,) * lead if keepdims else ()) + x.shape[lead:])


class Sum(Primitive):
    """sum(x, axes=(normalized ints), keepdims)."""

    name = "sum"
    reduction = Reduction(combine="add", order="pairwise")

    def abstract(self, x, *, axes, keepdims):
        _check_axes(self.name, x.shape, axes)
        dtype = int64 if x.dtype.kind == "b" else x.dtype  # a bool sum counts, as the kernel does
        return AbstractValue(reduced_shape(x.shape, axes, keepdims), dtype)

    def kernel(self, xp, x, *, axes, keepdims):
        if x.dtype.kind == "f":
            fast = window_reduce(xp, xp.add, x, axes, keepdims)
            if fast is not None:
                return fast
        if x.dtype.kind == "V":  # bfloat16: accumulate in float32, round once (as PyTorch)
            return xp.sum(x, axis=_array_axes(x, axes), keepdims=keepdims, dtype=xp.float32).astype(x.dtype)
        dtype = x.dtype if x.dtype.kind != "b" else None
        if xp is np:  # np.sum's own call, without its Python wrapper
            return xp.add.reduce(x, axis=_array_axes(x, axes), dtype=dtype, keepdims=keepdims)
        leading = _leading_sum_on_gpu(xp, x, axes, keepdims)
        if leading is not None:
            return leading
        return xp.sum(x, axis=_array_axes(x, axes), keepdims=keepdims, dtype=dtype)

    def vjp(self, g, inputs, node, *, axes, keepdims):
        x = inputs[0]
        f = F()
        if not keepdims:
            g = f.reshape(g, reduced_shape(x.shape, axes, True))
        return (f.expand(g, x.shape),)


class Prod(Primitive):
    """prod(x, axes, keepdims). The VJP is the product of the other elements (exact with zeros)."""

    name = "prod"
    saves_inputs = (0,)

    def abstract(self, x, *, axes, keepdims):
        _check_axes(self.name, x.shape, axes)
        dtype = int64 if x.dtype.kind == "b" else x.dtype
        return AbstractValue(reduced_shape(x.shape, axes, keepdims), dtype)

    def kernel(self, xp, x, *, axes, keepdims):
        return xp.prod(x, axis=_array_axes(x, axes), keepdims=keepdims,
                       dtype=x.dtype if x.dtype.kind != "b" else None)

    def vjp(self, g, inputs, node, *, axes, keepdims):
        x = inputs[0]
        f = F()
        if not keepdims:
            g = f.reshape(g, reduced_shape(x.shape, axes, True))
        zero = f.eq(x, 0)
        x1 = f.where(zero, f.ones_like(x), x)
        p1 = f.prod(x1, axes, True)  # the product of the nonzero elements
        nz = f.sum(f.cast(zero, x.dtype), axes, True)
        # no zero: p / x; one zero: p1 at the zero, 0 elsewhere; two or more: 0 everywhere
        others = f.where(f.eq(nz, 0), f.div(p1, x1), f.where(f.logical_and(f.eq(nz, 1), zero), p1, f.zeros_like(x)))
        return (f.mul(others, g),)


class Max(Primitive):
    """max(x, axes, keepdims). The gradient is shared evenly among tied maxima."""

    name = "max"
    reduction = Reduction(combine="maximum", order="any")
    saves_inputs = (0,)
    saves_output = True

    def abstract(self, x, *, axes, keepdims):
        _check_axes(self.name, x.shape, axes)
        if any(x.shape[a] == 0 for a in axes if a < len(x.shape)):
            raise ShapeError(f"max: cannot reduce an empty dimension of shape {tuple(x.shape)}")
        return AbstractValue(reduced_shape(x.shape, axes, keepdims), x.dtype)

    def kernel(self, xp, x, *, axes, keepdims):
        fast = window_reduce(xp, xp.maximum, x, axes, keepdims)
        if fast is not None:
            return fast
        if xp is np:  # np.max's own call, without its Python wrapper
            return xp.maximum.reduce(x, axis=_array_axes(x, axes), keepdims=keepdims)
        return xp.max(x, axis=_array_axes(x, axes), keepdims=keepdims)

    def vjp(self, g, inputs, node, *, axes, keepdims):
        x = inputs[0]
        f = F()
        out = node.output()
        if array_vjp(g) and windowed(tuple(x.shape), axes) and x._data.dtype.kind == "f":
            from ..tensor import Tensor  # noqa: PLC0415 - cycle: tensor imports the primitives

            return (Tensor._wrap(window_max_grad(g._data, x._data, out._data, axes), g._device),)
        if not keepdims:
            kept = reduced_shape(x.shape, axes, True)
            g = f.reshape(g, kept)
            out = f.reshape(out, kept)
        mask = f.cast(f.eq(x, out), x.dtype)
        count = f.sum(mask, dim=axes, keepdim=True)
        # each maximum's share, divided at the reduced shape: one full-size pass fewer than
        # (mask / count) * g, and g / count rounds once where (1 / count) * g rounds twice
        return (f.mul(mask, f.div(g, count)),)


class Argmax(Primitive):
    """Index of the first maximum along one axis (int64). axis=None flattens."""

    name = "argmax"

    def abstract(self, x, *, axis, keepdims):
        if axis is None:
            return AbstractValue((1,) * len(x.shape) if keepdims else (), int64)
        _check_axes(self.name, x.shape, (axis,))
        return AbstractValue(reduced_shape(x.shape, (axis,), keepdims), int64)

    def kernel(self, xp, x, *, axis, keepdims):
        return xp.argmax(x, axis=axis, keepdims=keepdims).astype(xp.int64, copy=False)


class Cumsum(Primitive):
    name = "cumsum"

    def abstract(self, x, *, axis):
        _check_axes(self.name, x.shape, (axis,))
        return x

    def kernel(self, xp, x, *, axis):
        if x.ndim == 0:  # NumPy would return shape (1,); a 0-d cumsum is the value itself
            return xp.array(x, copy=True)
        if x.dtype.kind == "V":  # bfloat16: accumulate in float32, round each output once
            return xp.cumsum(x, axis=axis, dtype=xp.float32).astype(x.dtype)
        return xp.cumsum(x, axis=axis, dtype=x.dtype)

    def vjp(self, g, inputs, node, *, axis):
        f = F()
        if g.ndim == 0:
            return (g,)
        return (f.flip(f.cumsum(f.flip(g, (axis,)), axis), (axis,)),)
