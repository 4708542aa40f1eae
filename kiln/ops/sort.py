"""Ordering primitives: argsort and topk return int64 indices along one axis.

Their outputs are integers, so they have no VJP: `kiln.sort` and `kiln.topk` gather the
values at these indices, and the gather's VJP scatters the gradient back.

Orders are stable and put NaN above every number (last ascending, first descending),
as PyTorch does; ties keep their original order in both directions.
"""
from __future__ import annotations

from typing import Any

from ..dtypes import int64
from .primitive import AbstractValue, Primitive, ShapeError


def _check_axis(op: str, shape: tuple, axis: int) -> None:
    if not 0 <= axis < max(len(shape), 1):
        raise ShapeError(f"{op}: axis {axis} is out of range for a tensor of shape {tuple(shape)}")


def sort_indices(xp: Any, x: Any, axis: int, descending: bool) -> Any:
    """Stable argsort along `axis`; descending keeps ties in their original order too."""
    if x.ndim == 0:
        return xp.zeros((), dtype=xp.int64)
    if not descending:
        return xp.argsort(x, axis=axis, kind="stable").astype(xp.int64, copy=False)
    # sort the reversed array ascending (stable), then read the result backwards: the largest
    # come first, equal values in increasing index order, and NaN (sorted last) comes first
    n = x.shape[axis]
    order = xp.argsort(xp.flip(x, axis=axis), axis=axis, kind="stable")
    return (n - 1 - xp.flip(order, axis=axis)).astype(xp.int64, copy=False)


class Argsort(Primitive):
    """Indices that sort x along `axis` (stable; descending puts the largest and NaN first)."""

    name = "argsort"

    def abstract(self, x, *, axis, descending):
        _check_axis(self.name, x.shape, axis)
        return AbstractValue(tuple(x.shape), int64)

    def kernel(self, xp, x, *, axis, descending):
        return sort_indices(xp, x, axis, descending)


_PARTITION_RATIO = 8  # partition first when k is this much smaller than the axis


class Topk(Primitive):
    """Indices of the k largest (or smallest) entries along `axis`, in sorted order.

    The result is the first k of a stable sort: equal values come in index order, and
    when several compete for the last places, the lowest indices win.
    """

    name = "topk"

    def abstract(self, x, *, k, axis, largest):
        _check_axis(self.name, x.shape, axis)
        shape = tuple(x.shape)
        if shape and not 0 <= k <= shape[axis]:
            raise ShapeError(f"topk: k={k} is out of range for dim {axis} of size {shape[axis]}")
        return AbstractValue(shape[:axis] + (k,) + shape[axis + 1:] if shape else (), int64)

    def kernel(self, xp, x, *, k, axis, largest):
        if x.ndim == 0:
            return xp.zeros((), dtype=xp.int64)
        n = x.shape[axis]
        if 0 < k and k * _PARTITION_RATIO <= n:
            keep = _winners(xp, x, k, axis, largest)
            order = sort_indices(xp, xp.take_along_axis(x, keep, axis=axis), axis, largest)
            return xp.take_along_axis(keep, order, axis=axis).astype(xp.int64, copy=False)
        order = sort_indices(xp, x, axis, largest)
        return xp.take(order, xp.arange(k), axis=axis)


def _winners(xp: Any, x: Any, k: int, axis: int, largest: bool) -> Any:
    """Indices (in index order) of the k entries a full stable sort would put first, in O(n).

    A partition finds the k-th value t; the winners are the entries beyond t plus the first
    entries equal to t (in index order) that are still needed, NaN counting as the largest.
    """
    n = x.shape[axis]
    kth = n - k if largest else k - 1
    t = xp.take_along_axis(x, xp.take(xp.argpartition(x, kth, axis=axis), [kth], axis=axis), axis=axis)
    if x.dtype.kind in "fV":
        nan, t_nan = xp.isnan(x), xp.isnan(t)
        if largest:
            beyond = xp.where(t_nan, False, (x > t) | nan)
        else:
            beyond = xp.where(t_nan, ~nan, x < t)
        tied = xp.where(t_nan, nan, x == t)
    else:
        beyond = (x > t) if largest else (x < t)
        tied = x == t
    needed = k - beyond.sum(axis=axis, keepdims=True)
    chosen = beyond | (tied & (xp.cumsum(tied, axis=axis) <= needed))
    # a stable sort of the bool mask (radix sort in NumPy) lists the k chosen indices in order
    return xp.take(xp.argsort(~chosen, axis=axis, kind="stable"), xp.arange(k), axis=axis)
