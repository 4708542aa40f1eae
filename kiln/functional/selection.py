"""Order statistics and data-dependent selections, PyTorch's way: median, kthvalue, quantile, msort,
nonzero, argwhere, masked_select, bincount, searchsorted, bucketize.

The order statistics sort (kiln.sort) and gather, so their values carry gradients to the elements
selected. The selections read their tensor's values (their results' sizes depend on them): inside
``kiln.compile`` each is a graph break, as `unique` is (the call runs eagerly; ``fullgraph=True`` raises).

>>> kiln.median(kiln.tensor([3.0, 1.0, 2.0, 4.0]))          # the lower median, 2.0
>>> kiln.nonzero(kiln.tensor([[0, 1], [2, 0]]))             # [[0, 1], [1, 0]]
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..ops.primitive import ShapeError
from ..tensor import Tensor, tensor
from .checks import int_arg
from .compound import lerp
from .math import _as_tensor, _floating, normalize_axes
from .shape import expand, gather_unchecked, index_select, reshape, select, squeeze, unsqueeze
from .sorting import argsort, sort


class ValuesIndices(NamedTuple):
    """``(values, indices)`` of `median`, `kthvalue` (PyTorch's return type of the same shape)."""

    values: Tensor
    indices: Tensor


# ---- order statistics -------------------------------------------------------------------------------------
def _kth(x: Tensor, k: int, dim: int, keepdim: bool) -> ValuesIndices:
    """The k-th smallest (0-based) along `dim`, with its index in x; stable among equal values."""
    order = argsort(x, dim)
    index = select(order, dim, k)
    values = gather_unchecked(x, dim, unsqueeze(index, dim))
    values = values if keepdim else squeeze(values, dim)
    return ValuesIndices(values, unsqueeze(index, dim) if keepdim else index)


def median(x: Any, dim: int | None = None, keepdim: bool = False) -> Any:
    """The lower median (the ((n - 1) // 2)-th smallest, as PyTorch: never an average). Over every element
    when `dim` is None (a 0-d tensor); along `dim`, ``(values, indices)``. NaN counts as the largest value."""
    x = _as_tensor(x)
    if dim is None:
        flat = reshape(x, (-1,))
        if flat.shape[0] == 0:
            raise ValueError("median(): the input is empty; PyTorch returns NaN there, kiln asks for a non-empty one")
        return _kth(flat, (flat.shape[0] - 1) // 2, 0, False).values
    d = normalize_axes(int_arg("median", "dim", dim), x.ndim, "median")[0]
    if x.shape[d] == 0:
        raise ValueError(f"median(): dim {dim} of shape {tuple(x.shape)} is empty")
    return _kth(x, (x.shape[d] - 1) // 2, d, keepdim)


def kthvalue(x: Any, k: int, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    """``(values, indices)`` of the k-th smallest element (1-based k) along `dim`."""
    x = _as_tensor(x)
    d = normalize_axes(int_arg("kthvalue", "dim", dim), x.ndim, "kthvalue")[0] if x.ndim else 0
    size = x.shape[d] if x.ndim else 1
    k = int_arg("kthvalue", "k", k)
    if not 1 <= k <= size:
        raise ValueError(f"kthvalue(): k={k} is out of range: expected 1 <= k <= {size}, the size of dim {dim}")
    if x.ndim == 0:
        return ValuesIndices(x * 1, tensor(0))
    return _kth(x, k - 1, d, keepdim)


def quantile(x: Any, q: Any, dim: int | None = None, keepdim: bool = False, *,
             interpolation: str = "linear") -> Tensor:
    """The q-th quantiles (q in [0, 1], a number or a 1-D tensor, which adds a leading dim) over every element
    or along `dim`, between the two nearest sorted values by `interpolation` ("linear", "lower", "higher",
    "nearest", "midpoint"), as PyTorch computes them."""
    modes = ("linear", "lower", "higher", "nearest", "midpoint")
    if interpolation not in modes:
        raise ValueError(f"quantile(): interpolation must be one of {modes}, got {interpolation!r}")
    x = _floating(x)
    qs = np.asarray(q.tolist() if isinstance(q, Tensor) else q, dtype=np.float64)
    if qs.ndim > 1 or ((qs < 0) | (qs > 1)).any():
        raise ValueError(f"quantile(): q must be a number or 1-D tensor of values in [0, 1], got {qs.tolist()}")
    if dim is None:
        x, d, keep_shape = reshape(x, (-1,)), 0, (1,) * x.ndim
    else:
        d = normalize_axes(int_arg("quantile", "dim", dim), x.ndim, "quantile")[0]
        keep_shape = None
    n = x.shape[d]
    if n == 0:
        raise ValueError("quantile(): the input is empty along the reduced dim")
    values = sort(x, d).values
    out = []
    for p in qs.reshape(-1):
        rank = float(p) * (n - 1)
        lo, hi = int(np.floor(rank)), int(np.ceil(rank))
        if interpolation == "nearest":
            lo = hi = int(np.round(rank))  # half to even, as PyTorch
        a, b = select(values, d, lo), select(values, d, hi)
        if interpolation == "lower" or interpolation == "nearest":
            r = a
        elif interpolation == "higher":
            r = b
        elif interpolation == "midpoint":
            r = lerp(a, b, 0.5)
        else:
            r = lerp(a, b, rank - lo)
        if keepdim:
            r = reshape(r, keep_shape) if keep_shape is not None else unsqueeze(r, d)
        out.append(r)
    if qs.ndim == 0:
        return out[0]
    from .shape import stack  # noqa: PLC0415 - next to its only use

    return stack(out, 0)


def msort(x: Any) -> Tensor:
    """x sorted along dim 0."""
    return sort(_as_tensor(x), 0).values


# ---- data-dependent selections -----------------------------------------------------------------------------
def nonzero(x: Any, *, as_tuple: bool = False) -> Any:
    """The indices of the non-zero elements, one row each in C order ((n, ndim), int64); with `as_tuple`, one
    1-D index tensor per dim (what ``x[mask]`` indexes with)."""
    x = _as_tensor(x)
    data = x._concrete("nonzero")
    found = np.argwhere(np.asarray(data)) if data.ndim else np.zeros((int(bool(data)), 0), np.int64)
    if as_tuple:
        columns = found.T if data.ndim else np.zeros((1, found.shape[0]), np.int64)
        return tuple(tensor(c.astype(np.int64), device=x.device) for c in columns)
    return tensor(found.astype(np.int64), device=x.device)


def argwhere(x: Any) -> Tensor:
    """`nonzero` as one (n, ndim) tensor."""
    return nonzero(x)


def masked_select(x: Any, mask: Any) -> Tensor:
    """The elements of x where `mask` is true (both broadcast), as a 1-D tensor; differentiable in x."""
    x, mask = _as_tensor(x), _as_tensor(mask)
    if mask.dtype.name != "bool":
        raise TypeError(f"masked_select(): mask must be a bool tensor, got {mask.dtype.name}")
    shape = tuple(np.broadcast_shapes(tuple(x.shape), tuple(mask.shape)))
    picked = np.flatnonzero(np.broadcast_to(np.asarray(mask._concrete("masked_select")), shape))
    flat = reshape(expand(x, shape) if tuple(x.shape) != shape else x, (-1,))
    return index_select(flat, 0, tensor(picked.astype(np.int64), device=x.device))


def bincount(x: Any, weights: Any = None, minlength: int = 0) -> Tensor:
    """How often each value 0, 1, ... occurs in the 1-D non-negative int tensor x (or the sum of `weights`
    there), at least `minlength` long. Not differentiable (as in PyTorch)."""
    x = _as_tensor(x)
    if x.ndim != 1 or x.dtype.name not in ("int64", "int32", "int16", "int8", "uint8"):
        raise TypeError(f"bincount(): expected a 1-D integer tensor, got {x.dtype.name} of shape {tuple(x.shape)}")
    data = np.asarray(x._concrete("bincount"))
    if data.size and data.min() < 0:
        raise ValueError(f"bincount(): values must be non-negative, got {int(data.min())}")
    if weights is None:
        return tensor(np.bincount(data, minlength=int(minlength)).astype(np.int64), device=x.device)
    w = _as_tensor(weights)
    if tuple(w.shape) != tuple(x.shape):
        raise ShapeError(f"bincount(): weights must have x's shape {tuple(x.shape)}, got {tuple(w.shape)}")
    counted = np.bincount(data, np.asarray(w._concrete("bincount"), np.float64), minlength=int(minlength))
    dtype = w.dtype.name if w.dtype.is_floating_point else "float64"
    return tensor(counted.astype(dtype), device=x.device)


def searchsorted(sorted_sequence: Any, values: Any, *, out_int32: bool = False, right: bool = False,
                 side: str | None = None, sorter: Any = None) -> Tensor:
    """For each value, the index where it would be inserted into the sorted last dim of `sorted_sequence` to
    keep it sorted: before equal entries, or after them with ``right=True`` / ``side="right"``."""
    if side is not None:
        if side not in ("left", "right"):
            raise ValueError(f"searchsorted(): side must be 'left' or 'right', got {side!r}")
        if right and side == "left":
            raise ValueError("searchsorted(): side='left' contradicts right=True")
        right = side == "right"
    seq, vals = _as_tensor(sorted_sequence), _as_tensor(values)
    s = np.asarray(seq._concrete("searchsorted"))
    v = np.asarray(vals._concrete("searchsorted"))
    if sorter is not None:
        s = np.take_along_axis(s, np.asarray(_as_tensor(sorter)._concrete("searchsorted")), -1)
    how = "right" if right else "left"
    if s.ndim <= 1:
        found = np.searchsorted(s, v, side=how)
    else:
        if s.shape[:-1] != v.shape[:-1]:
            raise ShapeError(f"searchsorted(): the leading dims of sorted_sequence {s.shape} and values {v.shape} "
                             "must match")
        rows = s.reshape(-1, s.shape[-1])
        found = np.stack([np.searchsorted(r, q, side=how) for r, q in zip(rows, v.reshape(len(rows), -1))])
        found = found.reshape(v.shape)
    return tensor(np.asarray(found).astype(np.int32 if out_int32 else np.int64), device=seq.device)


def bucketize(input: Any, boundaries: Any, *, out_int32: bool = False, right: bool = False) -> Tensor:  # noqa: A002
    """The bucket of each input value among the 1-D sorted `boundaries`: i with boundaries[i-1] < x <=
    boundaries[i] (``right=True``: boundaries[i-1] <= x < boundaries[i])."""
    b = _as_tensor(boundaries)
    if b.ndim != 1:
        raise ShapeError(f"bucketize(): boundaries must be 1-D, got shape {tuple(b.shape)}")
    return searchsorted(b, input, out_int32=out_int32, right=right)
