"""Unbuffered in-place ufunc updates (``np.add.at`` and kin) at flat positions.

``np.add.at(out, (i0, i1, ...), values)`` with a tuple of index arrays goes through NumPy's
general indexing iterator, which is 5-8x slower than the same update given one 1-D array of
flat positions into ``out.reshape(-1)`` (NumPy's fast path). `ufunc_at` turns a tuple of
integer index arrays into those flat positions and makes that call. The updates happen in
the same order, element by element, so the result has the same bits as ``ufunc.at`` with
the tuple: scatter-adds (embedding and gather gradients, sparse products) keep their
summation order.

Anything else (slices, booleans, an array module other than NumPy, a non-contiguous
`out`) goes to ``ufunc.at`` unchanged, which also raises NumPy's IndexError for an index
out of range.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np


def ufunc_at(xp: Any, ufunc: Any, out: Any, where: tuple, values: Any) -> None:
    """``ufunc.at(out, where, values)``, through flat positions where NumPy allows it."""
    flat = _flat_positions(xp, out, where) if xp is np else None
    if flat is None:
        ufunc.at(out, where, values)
        return
    ufunc.at(out.reshape(-1), flat.reshape(-1), np.broadcast_to(values, flat.shape).reshape(-1))


def _flat_positions(xp: Any, out: Any, where: tuple) -> Any:
    """Flat positions in `out` of ``out[where]``, in its C order; None unless `where` is integer arrays only."""
    if not isinstance(where, tuple) or not out.flags.c_contiguous:
        return None
    while where and isinstance(where[-1], slice) and where[-1] == slice(None):
        where = where[:-1]  # a trailing whole dim is what leaving it out means
    if not where or len(where) > out.ndim:
        return None
    if not all(isinstance(i, np.ndarray) and i.dtype.kind in "iu" for i in where):
        return None
    shape = np.broadcast_shapes(*(index.shape for index in where))
    flat = None
    for size, index, stride in zip(out.shape, where, _element_strides(out.shape)):
        index = _compact(index).astype(np.intp, copy=False)
        if index.size:
            low, high = index.min(), index.max()
            if low < -size or high >= size:
                return None  # ufunc.at raises NumPy's IndexError
            if low < 0:
                index = np.where(index < 0, index + size, index)
        term = index * stride
        flat = term if flat is None else flat + term
    if flat.shape != shape:  # every index was broadcast along some dim: the positions repeat along it
        flat = np.broadcast_to(flat, shape)
    trailing = out.shape[len(where):]
    if trailing:
        offsets = np.arange(math.prod(trailing), dtype=np.intp).reshape(trailing)
        flat = flat.reshape(flat.shape + (1,) * len(trailing)) + offsets
    return flat


def _compact(index: Any) -> Any:
    """`index` with each dim it is broadcast along (stride 0) cut to size 1: the same values, which
    broadcast back, and the range checks and products above run once per distinct value."""
    if all(stride or size <= 1 for size, stride in zip(index.shape, index.strides)):
        return index
    return index[tuple(slice(0, 1) if stride == 0 and size > 1 else slice(None)
                       for size, stride in zip(index.shape, index.strides))]


def _element_strides(shape: tuple) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return strides[::-1]
