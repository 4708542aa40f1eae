"""Stacking, splitting and rearranging, PyTorch's way: hstack, vstack, atleast_2d, tensor_split, unflatten,
rot90, repeat_interleave, meshgrid, tril_indices, ...

All are views, concatenations or index selections of kiln ops, so they are differentiable and compile.

>>> kiln.hstack([kiln.zeros(2), kiln.ones(3)]).shape          # (5,)
>>> [t.shape for t in kiln.tensor_split(kiln.arange(7), 3)]   # [(3,), (2,), (2,)]
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..ops.primitive import ShapeError
from ..tensor import Tensor, tensor
from ..sizes import is_int
from .math import _as_tensor, normalize_axes
from .shape import cat, expand, flip, index_select, narrow, reshape, transpose


# ---- at least n dims, and stacking -------------------------------------------------------------------------
def _at_least(n: int, tensors: tuple) -> Any:
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    out = []
    for t in tensors:
        t = _as_tensor(t)
        if t.ndim < n:
            # PyTorch's rules: a vector becomes a row (1, n); a matrix gains a trailing dim (m, n, 1)
            shape = {0: (1,) * n, 1: (1, t.shape[0]) + (1,) * (n - 2)}.get(t.ndim, tuple(t.shape) + (1,))
            t = reshape(t, shape)
        out.append(t)
    return out[0] if len(out) == 1 else tuple(out)


def atleast_1d(*tensors: Any) -> Any:
    """Each tensor with at least 1 dim (a 0-d one becomes shape (1,)); one tensor in, one out."""
    return _at_least(1, tensors)


def atleast_2d(*tensors: Any) -> Any:
    """Each tensor with at least 2 dims: a vector of n becomes (1, n)."""
    return _at_least(2, tensors)


def atleast_3d(*tensors: Any) -> Any:
    """Each tensor with at least 3 dims: a vector of n becomes (1, n, 1), a matrix (m, n) becomes (m, n, 1)."""
    return _at_least(3, tensors)


def _sequence(op: str, tensors: Any) -> list[Tensor]:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{op}: expected a sequence of tensors, got {type(tensors).__name__}")
    if not tensors:
        raise ValueError(f"{op}: expects a non-empty sequence of tensors")
    return [_as_tensor(t) for t in tensors]


def hstack(tensors: Sequence[Tensor]) -> Tensor:
    """Join along dim 1, or along dim 0 when every tensor is a vector."""
    ts = [atleast_1d(t) for t in _sequence("hstack", tensors)]
    return cat(ts, 0 if all(t.ndim == 1 for t in ts) else 1)


def vstack(tensors: Sequence[Tensor]) -> Tensor:
    """Join along dim 0, vectors taken as rows."""
    return cat([atleast_2d(t) for t in _sequence("vstack", tensors)], 0)


row_stack = vstack


def dstack(tensors: Sequence[Tensor]) -> Tensor:
    """Join along dim 2, after `atleast_3d`."""
    return cat([atleast_3d(t) for t in _sequence("dstack", tensors)], 2)


def column_stack(tensors: Sequence[Tensor]) -> Tensor:
    """Join along dim 1, vectors (and scalars) taken as columns."""
    ts = _sequence("column_stack", tensors)
    return cat([reshape(t, (-1, 1)) if t.ndim <= 1 else t for t in ts], 1)


# ---- splitting and reshaping ------------------------------------------------------------------------------
def tensor_split(x: Tensor, indices_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """Views of x split along `dim`: into n parts as equal as can be (the first ``size % n`` one longer),
    or at the given indices."""
    d = normalize_axes(dim, x.ndim, "tensor_split")[0]
    size = int(x.shape[d])
    if isinstance(indices_or_sections, Tensor):
        indices_or_sections = indices_or_sections.tolist()
    if is_int(indices_or_sections):
        n = int(indices_or_sections)
        if n <= 0:
            raise ValueError(f"tensor_split: the number of sections must be positive, got {n}")
        bounds = [k * (size // n) + min(k, size % n) for k in range(n + 1)]
    else:
        bounds = [0, *[min(max(int(i) if int(i) >= 0 else int(i) + size, 0), size) for i in indices_or_sections], size]
    return tuple(narrow(x, d, a, max(b - a, 0)) for a, b in zip(bounds, bounds[1:]))


def unflatten(x: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    """x with dim `dim` split into `sizes` (one of them may be -1)."""
    d = normalize_axes(dim, x.ndim, "unflatten")[0]
    sizes = tuple(int(s) for s in sizes)
    known = int(np.prod([s for s in sizes if s != -1]))
    if sizes.count(-1) > 1 or (-1 not in sizes and known != x.shape[d]) or (known and x.shape[d] % known):
        raise ShapeError(f"unflatten: sizes {sizes} do not split dim {dim} of size {x.shape[d]}")
    return reshape(x, tuple(x.shape[:d]) + sizes + tuple(x.shape[d + 1:]))


def fliplr(x: Tensor) -> Tensor:
    """x with its columns (dim 1) reversed; needs 2 dims or more."""
    if x.ndim < 2:
        raise ShapeError(f"fliplr: expected at least a 2-D tensor, got shape {tuple(x.shape)}")
    return flip(x, 1)


def flipud(x: Tensor) -> Tensor:
    """x with its rows (dim 0) reversed."""
    if x.ndim < 1:
        raise ShapeError("flipud: expected at least a 1-D tensor, got a 0-d one")
    return flip(x, 0)


def rot90(x: Tensor, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
    """x rotated by 90 degrees k times, from the first of `dims` toward the second."""
    if len(dims) != 2:
        raise ValueError(f"rot90: expected 2 dims, got {len(dims)}")
    a, b = (normalize_axes(int(d), x.ndim, "rot90")[0] for d in dims)  # (in the order given: the direction)
    if a == b:
        raise ValueError(f"rot90: the two dims must differ, got {tuple(dims)}")
    k %= 4
    if k == 1:
        return transpose(flip(x, b), a, b)
    if k == 2:
        return flip(x, (a, b))
    if k == 3:
        return flip(transpose(x, a, b), b)
    return x


def repeat_interleave(x: Any, repeats: Any = None, dim: int | None = None, *,
                      output_size: int | None = None) -> Tensor:
    """Each element (or slice along `dim`) repeated `repeats` times in place: ``[1, 2] -> [1, 1, 2, 2]``.
    `repeats` is an int or one count per element. With a tensor alone, its values are the counts of
    ``arange(len(x))``. Counts held in a tensor are read as Python values (under kiln.compile, a read)."""
    x = _as_tensor(x)
    if repeats is None:  # repeat_interleave(counts): arange(n) repeated counts times
        counts = np.asarray(x.tolist(), dtype=np.int64).reshape(-1)
        return tensor(np.repeat(np.arange(counts.size), counts))
    if dim is None:
        x, d = reshape(x, (-1,)), 0
    else:
        d = normalize_axes(dim, x.ndim, "repeat_interleave")[0]
    size = int(x.shape[d])
    counts = np.asarray(repeats.tolist() if isinstance(repeats, Tensor) else repeats, dtype=np.int64).reshape(-1)
    if counts.size == 1:
        counts = np.full(size, int(counts[0]))
    if counts.size != size or (counts < 0).any():
        raise ValueError(f"repeat_interleave: expected {size} non-negative repeats (or one), got {counts.tolist()}")
    index = np.repeat(np.arange(size), counts)
    if output_size is not None and output_size != index.size:
        raise ValueError(f"repeat_interleave: output_size {output_size} differs from the {index.size} repeats")
    return index_select(x, d, tensor(index, device=x.device))


# ---- grids and index sets -------------------------------------------------------------------------------
def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-D tensors: with "ij" the k-th grid varies along dim k; "xy" swaps the first
    two dims (NumPy's default). Each grid is an expanded view."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = [_as_tensor(t) for t in tensors]
    if any(t.ndim > 1 for t in ts):
        raise ShapeError(f"meshgrid: expected 0-D or 1-D tensors, got shapes {[tuple(t.shape) for t in ts]}")
    ts = [reshape(t, (-1,)) for t in ts]
    swap = indexing == "xy" and len(ts) >= 2
    order = [1, 0, *range(2, len(ts))] if swap else list(range(len(ts)))
    shape = tuple(int(ts[i].shape[0]) for i in order)
    grids = []
    for k, t in enumerate(ts):
        axis = order.index(k)
        view = reshape(t, tuple(-1 if a == axis else 1 for a in range(len(ts))))
        grids.append(expand(view, shape))
    return tuple(grids)


def _triangle_indices(op: str, lower: bool, row: int, col: int, offset: int, dtype: Any, device: Any) -> Tensor:
    if row < 0 or col < 0:
        raise ValueError(f"{op}: row and col must be non-negative, got {row} and {col}")
    found = np.tril_indices(row, offset, col) if lower else np.triu_indices(row, offset, col)
    return tensor(np.stack(found).astype(np.int64), dtype=dtype or "int64", device=device)


def tril_indices(row: int, col: int, offset: int = 0, *, dtype: Any = None, device: Any = None) -> Tensor:
    """The (2, N) indices of the lower triangle of a row x col matrix, row by row."""
    return _triangle_indices("tril_indices", True, row, col, offset, dtype, device)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype: Any = None, device: Any = None) -> Tensor:
    """The (2, N) indices of the upper triangle of a row x col matrix, row by row."""
    return _triangle_indices("triu_indices", False, row, col, offset, dtype, device)
