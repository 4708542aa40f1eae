"""Movement primitives: reshape, permute, expand, index, pad, concat, flip, gather, scatter.

Indexing uses a hashable static `spec`, one entry per index item:
``("s", start, stop, step)`` a slice, ``("i", n)`` an integer, ``("n",)`` None,
``("e",)`` Ellipsis, and ``("t",)`` a tensor index taken from the op's inputs.
"""
from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from ..gradient_sum import index_gradient
from ..sizes import concrete, concrete_all
from .elementwise import F
from . import strided_views
from .primitive import AbstractValue, Primitive, ShapeError
from .ufunc_at import ufunc_at


def resolve_index(spec: tuple, idx_arrays: tuple | list) -> tuple:
    """Turn a static spec plus tensor index arrays into a NumPy index tuple."""
    out: list[Any] = []
    it = iter(idx_arrays)
    for entry in spec:
        kind = entry[0]
        if kind == "s":
            out.append(slice(entry[1], entry[2], entry[3]))
        elif kind == "i":
            out.append(entry[1])
        elif kind == "n":
            out.append(None)
        elif kind == "e":
            out.append(Ellipsis)
        else:
            out.append(next(it))
    return tuple(out)


def _slice_length(size: Any, start: Any, stop: Any, step: Any) -> Any:
    """len(range(size)[start:stop:step]) for step > 0, in arithmetic that keeps SymInts."""
    step = 1 if step is None else step
    if step <= 0:
        return None
    start = 0 if start is None else (start + size if start < 0 else start)
    stop = size if stop is None else (stop + size if stop < 0 else stop)
    start = min(max(start, 0), size)
    stop = min(max(stop, 0), size)
    return max(stop - start + step - 1, 0) // step


def symbolic_index_shape(shape: tuple, idx_shapes: list[tuple], spec: tuple) -> tuple | None:
    """x[spec]'s shape built from x's (possibly symbolic) dims; None for cases left to NumPy.

    Handles slices, ints, None, Ellipsis, and one adjacent run of tensor indices without ints.
    """
    kinds = [e[0] for e in spec]
    if "t" in kinds:
        first, last = kinds.index("t"), len(kinds) - 1 - kinds[::-1].index("t")
        if "i" in kinds or any(k != "t" for k in kinds[first:last + 1]):
            return None
    consumed = sum(1 for k in kinds if k in "sit")
    dims = iter(shape)
    out: list[Any] = []
    advanced = iter(idx_shapes)
    placed = False
    for entry in spec:
        kind = entry[0]
        if kind == "s":
            length = _slice_length(next(dims), *entry[1:])
            if length is None:
                return None
            out.append(length)
        elif kind == "i":
            next(dims)
        elif kind == "n":
            out.append(1)
        elif kind == "e":
            out.extend(next(dims) for _ in range(len(shape) - consumed))
        else:
            next(dims)
            if not placed:
                from .elementwise import broadcast_shapes  # noqa: PLC0415

                out.extend(broadcast_shapes("index", *[next(advanced) for _ in range(kinds.count("t"))]))
                placed = True
    out.extend(dims)
    return tuple(out)


def is_basic(spec: tuple) -> bool:
    return all(e[0] != "t" for e in spec)


class Reshape(Primitive):
    name = "reshape"
    is_view = identity = True

    def abstract(self, x, *, shape):
        if math.prod(shape) != math.prod(x.shape):
            raise ShapeError(f"reshape: cannot reshape a tensor of shape {tuple(x.shape)} "
                             f"({math.prod(x.shape)} elements) into shape {tuple(shape)}")
        return AbstractValue(tuple(shape), x.dtype)

    def kernel(self, xp, x, *, shape):
        return x.reshape(shape)

    def view_strides(self, shape_in, strides, offset, *, shape):
        return strided_views.reshaped(shape_in, strides, offset, shape)

    def vjp(self, g, inputs, node, *, shape):
        return (F().reshape(g, inputs[0].shape),)


class Permute(Primitive):
    name = "permute"
    is_view = True

    def abstract(self, x, *, perm):
        if sorted(perm) != list(range(len(x.shape))):
            raise ShapeError(f"permute: {tuple(perm)} is not a permutation of the "
                             f"{len(x.shape)} dims of shape {tuple(x.shape)}")
        return AbstractValue(tuple(x.shape[p] for p in perm), x.dtype)

    def kernel(self, xp, x, *, perm):
        return x.transpose(perm)

    def view_strides(self, shape, strides, offset, *, perm):
        return strided_views.permuted(shape, strides, offset, tuple(perm))

    def vjp(self, g, inputs, node, *, perm):
        inverse = tuple(int(i) for i in np.argsort(perm))
        return (F().permute(g, inverse),)


class Expand(Primitive):
    """Broadcast size-1 dims to `shape` (same ndim; the frontend adds leading dims)."""

    name = "expand"
    is_view = broadcast = True

    def abstract(self, x, *, shape):
        if len(shape) != len(x.shape) or any(d != 1 and d != s for d, s in zip(x.shape, shape)):
            raise ShapeError(f"expand: cannot expand shape {tuple(x.shape)} to {tuple(shape)}")
        return AbstractValue(tuple(shape), x.dtype)

    def kernel(self, xp, x, *, shape):
        return xp.broadcast_to(x, shape)

    def view_strides(self, shape_in, strides, offset, *, shape):
        return strided_views.expanded(shape_in, strides, offset, tuple(shape))

    def vjp(self, g, inputs, node, *, shape):
        x = inputs[0]
        axes = tuple(i for i, (d, s) in enumerate(zip(x.shape, shape)) if d == 1 and s != 1)
        if not axes:
            return (g,)
        return (F().sum(g, dim=axes, keepdim=True),)


class Index(Primitive):
    """x[spec] with tensor indices as extra inputs (basic specs give views)."""

    name = "index"
    is_view = True  # conservative: advanced indexing copies, basic indexing shares memory

    def abstract(self, x, *idx, spec):
        # the traced sizes give the shape; symbolic_index_shape keeps the symbolic dims below
        dummy = np.broadcast_to(np.empty((), np.int8), concrete_all(x.shape))
        arrays = [np.zeros(concrete_all(i.shape), np.bool_ if i.dtype.name == "bool" else np.intp) for i in idx]
        try:
            shape = dummy[concrete_all(resolve_index(spec, arrays))].shape
        except IndexError as exc:  # stays an IndexError, as in PyTorch and NumPy
            raise IndexError(f"index: {exc} (tensor of shape {tuple(x.shape)})") from None
        symbolic = symbolic_index_shape(tuple(x.shape), [tuple(i.shape) for i in idx], spec)
        if symbolic is not None and len(symbolic) == len(shape) and all(concrete(a) == b for a, b in zip(symbolic, shape)):
            shape = symbolic  # same sizes, but dims computed from symbolic sizes stay symbolic
        return AbstractValue(shape, x.dtype)

    def kernel(self, xp, x, *idx, spec):
        return x[resolve_index(spec, idx)]

    def view_strides(self, shape, strides, offset, *, spec):
        return strided_views.indexed(shape, strides, offset, tuple(spec))

    def vjp(self, g, inputs, node, *, spec):
        x, *idx = inputs
        if not idx:  # a basic slice: its siblings may tile the dim (kiln/gradient_sum.py)
            return (index_gradient(g, spec, tuple(x.shape)),)
        return (F().index_grad(g, idx, spec, x.shape),) + (None,) * len(idx)


class IndexGrad(Primitive):
    """Scatter-add `g` into zeros of `shape` at x[spec]: the VJP of Index."""

    name = "index_grad"

    def abstract(self, g, *idx, spec, shape):
        return AbstractValue(tuple(shape), g.dtype)

    def kernel(self, xp, g, *idx, spec, shape):
        out = xp.zeros(shape, dtype=g.dtype)
        where = resolve_index(spec, idx)
        if is_basic(spec):
            out[where] = g
        else:
            ufunc_at(xp, xp.add, out, where, g)
        return out

    def vjp(self, gg, inputs, node, *, spec, shape):
        _, *idx = inputs
        return (F().bind_index(gg, idx, spec),) + (None,) * len(idx)


class IndexPut(Primitive):
    """A copy of x with x[spec] = v (v broadcasts): the out-of-place form of __setitem__."""

    name = "index_put"

    def abstract(self, x, v, *idx, spec):
        return x

    def kernel(self, xp, x, v, *idx, spec):
        out = x.copy()
        out[resolve_index(spec, idx)] = v
        return out

    def vjp(self, g, inputs, node, *, spec):
        x, v, *idx = inputs
        f = F()
        gx = gv = None
        if x.requires_grad:
            gx = f.index_put(g, f.zeros((), dtype=g.dtype, device=g.device), idx, spec)
        if v.requires_grad:
            gv = f.sum_to(f.bind_index(g, idx, spec), v.shape)
        return (gx, gv) + (None,) * len(idx)


class Pad(Primitive):
    """Constant padding; `pads` is ((lo, hi), ...) per dim, all >= 0."""

    name = "pad"

    def abstract(self, x, *, pads, value):
        if len(pads) != len(x.shape):
            raise ShapeError(f"pad: {len(pads)} (lo, hi) pairs for a tensor of {len(x.shape)} dims")
        return AbstractValue(tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, pads)), x.dtype)

    def kernel(self, xp, x, *, pads, value):
        return xp.pad(x, pads, mode="constant", constant_values=value)

    def vjp(self, g, inputs, node, *, pads, value):
        spec = tuple(("s", lo, lo + d, 1) for (lo, _), d in zip(pads, inputs[0].shape))
        return (F().bind_index(g, (), spec),)


class Concat(Primitive):
    name = "concat"

    def abstract(self, *xs, axis):
        first = xs[0]
        for x in xs[1:]:
            if x.dtype is not first.dtype:
                raise TypeError(f"concat: tensors must share a dtype, got {first.dtype.name} and {x.dtype.name}")
            if len(x.shape) != len(first.shape) or any(
                a != b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != axis
            ):
                raise ShapeError(f"concat: shapes {tuple(first.shape)} and {tuple(x.shape)} differ "
                                 f"outside the concatenation dim {axis}")
        shape = list(first.shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        return AbstractValue(tuple(shape), first.dtype)

    def kernel(self, xp, *xs, axis):
        return xp.concatenate(xs, axis=axis)

    def vjp(self, g, inputs, node, *, axis):
        grads = []
        start = 0
        f = F()
        for x in inputs:
            stop = start + x.shape[axis]
            if x.requires_grad:
                spec = tuple(("s", start, stop, 1) if i == axis else ("s", None, None, None)
                             for i in range(len(x.shape)))
                grads.append(f.bind_index(g, (), spec))
            else:
                grads.append(None)
            start = stop
        return tuple(grads)


class Flip(Primitive):
    name = "flip"
    is_view = True

    def abstract(self, x, *, axes):
        return x

    def kernel(self, xp, x, *, axes):
        return xp.flip(x, axis=axes)

    def vjp(self, g, inputs, node, *, axes):
        return (F().flip(g, axes),)


class Gather(Primitive):
    """out[..i..] = x[..idx[..i..]..] along `axis` (idx has x's shape off that axis)."""

    name = "gather"
    indexed = "gather"
    saves_inputs = (1,)

    def abstract(self, x, idx, *, axis):
        if len(idx.shape) != len(x.shape):
            raise ShapeError(f"gather: index has {len(idx.shape)} dims, input has {len(x.shape)}")
        return AbstractValue(tuple(idx.shape), x.dtype)

    def kernel(self, xp, x, idx, *, axis):
        line = _broadcast_index_line(idx, axis, x.shape)
        if line is not None:  # the same index in every row (an expanded 1-D index): whole slices
            return xp.take(x, line, axis=axis)
        return xp.take_along_axis(x, idx, axis=axis)

    def vjp(self, g, inputs, node, *, axis):
        x, idx = inputs
        f = F()  # idx was range-checked (or allowed negative, take_along_dim) by the forward op
        zeros = f.zeros(x.shape, dtype=g.dtype, device=g.device)
        return (f.shape.scatter_add_unchecked(zeros, axis, idx, g), None)


def _broadcast_index_line(idx: Any, axis: int, shape: tuple) -> Any:
    """The 1-D index along `axis` when `idx` is one broadcast over x's full other dims, else None."""
    if not isinstance(idx, np.ndarray) or idx.ndim < 2 or idx.size == 0:
        return None
    if any(idx.shape[i] != shape[i] or (idx.strides[i] != 0 and idx.shape[i] != 1)
           for i in range(idx.ndim) if i != axis):
        return None
    return idx[tuple(slice(None) if i == axis else 0 for i in range(idx.ndim))]


def _scatter_index(xp: Any, idx: Any, axis: int) -> tuple:
    ndim = idx.ndim  # an open grid, as np.indices(sparse=True) (which CuPy lacks) makes it
    grid = [xp.arange(n).reshape((1,) * i + (n,) + (1,) * (ndim - i - 1)) for i, n in enumerate(idx.shape)]
    grid[axis] = idx
    return tuple(grid)


class ScatterAdd(Primitive):
    """A copy of `base` with src added at idx along `axis` (src has idx's shape)."""

    name = "scatter_add"
    indexed = "scatter_add"
    saves_inputs = (1,)

    def abstract(self, base, idx, src, *, axis):
        if tuple(idx.shape) != tuple(src.shape):
            raise ShapeError(f"scatter_add: index shape {tuple(idx.shape)} != source shape {tuple(src.shape)}")
        return base

    def kernel(self, xp, base, idx, src, *, axis):
        out = base.copy()
        ufunc_at(xp, xp.add, out, _scatter_index(xp, idx, axis), src)
        return out

    def vjp(self, g, inputs, node, *, axis):
        base, idx, src = inputs
        f = F()
        return (g if base.requires_grad else None, None,
                f.shape.gather_unchecked(g, axis, idx) if src.requires_grad else None)


class Copy(Primitive):
    """A fresh contiguous copy (clone)."""

    name = "copy"
    fuses = True
    result_layout = "c"

    def abstract(self, x):
        return x

    def kernel(self, xp, x):
        return xp.array(x, copy=True, order="C")

    def vjp(self, g, inputs, node):
        return (g,)
