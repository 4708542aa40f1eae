"""Sorting and selection: sort, argsort, topk, unique.

`sort` and `topk` return ``(values, indices)`` named tuples, as PyTorch's do. The values
are gathered at the indices, so they are differentiable: the gradient of each value goes
back to the element it came from. Orders put NaN above every number and keep equal
elements in their original order.

>>> values, indices = kiln.topk(logits, 5)            # the 5 largest per row
>>> logits[logits < values[..., -1:]] = -float("inf")  # top-k filtering before sampling
"""
from __future__ import annotations

from typing import Any, NamedTuple

from ..ops.primitive import REGISTRY, bind
from ..tensor import Tensor
from .checks import int_arg
from .math import _as_tensor, normalize_axes
from .shape import clone, gather_unchecked

_P = REGISTRY


class SortResult(NamedTuple):
    """``(values, indices)`` of `kiln.sort`."""

    values: Tensor
    indices: Tensor


class TopkResult(NamedTuple):
    """``(values, indices)`` of `kiln.topk`."""

    values: Tensor
    indices: Tensor


def _axis(x: Tensor, dim: Any, op: str) -> int:
    if dim is None:
        raise TypeError(f"{op}(): dim must be an int, got None")
    return normalize_axes(int_arg(op, "dim", dim), x.ndim, op)[0]


def argsort(x: Any, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    """Indices (int64) that sort x along `dim`, ascending unless `descending`.

    The order is always stable (equal elements keep their order), so `stable` changes
    nothing; NaN sorts above every number.

    >>> kiln.argsort(kiln.tensor([3.0, 1.0, 2.0]))
    tensor([1, 2, 0])
    """
    x = _as_tensor(x)
    axis = _axis(x, dim, "argsort")
    return bind(_P["argsort"], (x,), {"axis": axis, "descending": bool(descending)})


def sort(x: Any, dim: int = -1, descending: bool = False, stable: bool = False) -> SortResult:
    """``(values, indices)`` of x sorted along `dim`; the values carry gradients.

    >>> values, indices = kiln.sort(kiln.tensor([3.0, 1.0, 2.0]), descending=True)
    """
    x = _as_tensor(x)
    indices = argsort(x, dim, descending, stable)
    if x.ndim == 0:
        return SortResult(clone(x), indices)
    return SortResult(gather_unchecked(x, _axis(x, dim, "sort"), indices), indices)


def topk(x: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> TopkResult:  # noqa: A002
    """``(values, indices)`` of the `k` largest (or smallest) elements along `dim`.

    Results are always in sorted order (largest first when `largest`); `sorted=False`
    is accepted. Gradients flow to the selected elements.

    >>> values, indices = kiln.topk(kiln.tensor([1.0, 5.0, 3.0]), 2)   # [5., 3.], [1, 2]
    """
    x = _as_tensor(x)
    k = int_arg("topk", "k", k)
    axis = _axis(x, dim, "topk")
    size = x.shape[axis] if x.ndim else 1
    if not 0 <= k <= size:
        raise ValueError(f"topk(): k={k} is out of range: expected 0 <= k <= {size}, the size of dim {dim} "
                         f"(shape {tuple(x.shape)})")
    indices = bind(_P["topk"], (x,), {"k": k, "axis": axis, "largest": bool(largest)})
    if x.ndim == 0:
        return TopkResult(clone(x), indices)
    return TopkResult(gather_unchecked(x, axis, indices), indices)


def unique(x: Any, sorted: bool = True, return_inverse: bool = False,  # noqa: A002
           return_counts: bool = False, dim: int | None = None) -> Any:
    """The distinct elements of x (or distinct slices along `dim`), in ascending order.

    With `return_inverse`, also the index of each input element (or slice) in the result;
    with `return_counts`, how often each distinct element occurs. NaNs are all distinct,
    as in PyTorch. The result is sorted even with ``sorted=False`` (where PyTorch leaves
    the order unspecified). The result's size depends on the data, so inside ``kiln.compile`` this
    is a graph break (the call runs eagerly; with ``fullgraph=True`` it raises).

    >>> values, inverse, counts = kiln.unique(kiln.tensor([2, 1, 2]), return_inverse=True, return_counts=True)
    """
    x = _as_tensor(x)
    data = x._concrete("unique")
    xp = x._device.xp
    if dim is None:
        flat = data.reshape(-1)
        values, inverse, counts = _unique_1d(xp, flat)
        inverse = inverse.reshape(data.shape)
    else:
        axis = _axis(x, dim, "unique")
        if data.ndim == 0:
            raise IndexError("unique(): dim given for a 0-d tensor; pass dim=None")
        values, inverse, counts = _unique_slices(xp, data, axis)
    out = [Tensor._wrap(values, x._device)]
    if return_inverse:
        out.append(Tensor._wrap(inverse.astype(xp.int64), x._device))
    if return_counts:
        out.append(Tensor._wrap(counts.astype(xp.int64), x._device))
    return out[0] if len(out) == 1 else tuple(out)


def _unique_1d(xp: Any, flat: Any) -> tuple[Any, Any, Any]:
    """Sorted distinct values, inverse and counts; each NaN is its own value (NumPy would merge them)."""
    order = xp.argsort(flat, kind="stable")
    ordered = flat[order]
    if flat.size:
        new = xp.ones(flat.size, dtype=bool)
        new[1:] = ordered[1:] != ordered[:-1]  # NaN != NaN: every NaN starts a group
    else:
        new = xp.zeros(0, dtype=bool)
    group = xp.cumsum(new) - 1
    inverse = xp.empty(flat.size, dtype=xp.int64)
    inverse[order] = group
    starts = xp.flatnonzero(new)
    counts = xp.diff(xp.append(starts, flat.size))
    return ordered[starts], inverse, counts


def _unique_slices(xp: Any, data: Any, axis: int) -> tuple[Any, Any, Any]:
    moved = xp.moveaxis(data, axis, 0)
    rows = moved.reshape(moved.shape[0], -1)
    if rows.shape[0] == 0:
        return data.copy(), xp.zeros(0, dtype=xp.int64), xp.zeros(0, dtype=xp.int64)
    # lexicographic order of the slices: sort by the last column first (np.lexsort's convention)
    order = xp.lexsort(rows.T[::-1]) if rows.shape[1] else xp.arange(rows.shape[0])
    ordered = rows[order]
    new = xp.ones(rows.shape[0], dtype=bool)
    new[1:] = xp.any(ordered[1:] != ordered[:-1], axis=1)
    group = xp.cumsum(new) - 1
    inverse = xp.empty(rows.shape[0], dtype=xp.int64)
    inverse[order] = group
    starts = xp.flatnonzero(new)
    counts = xp.diff(xp.append(starts, rows.shape[0]))
    values = moved[order[starts]]
    return xp.ascontiguousarray(xp.moveaxis(values, 0, axis)), inverse, counts
