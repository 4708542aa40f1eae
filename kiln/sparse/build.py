"""Building COO tensors and converting them: `sparse_coo_tensor`, `to_dense`, `coalesce`, `dense_to_sparse`.

`to_dense` is a scatter-add of the values into zeros (kiln ops: it traces and is
differentiable). `coalesce` and `dense_to_sparse` read index or tensor data in NumPy to
find the entries (a data-dependent number of them), then move the values with kiln ops,
so gradients flow; under kiln.compile that read is a graph break for a traced input and a
guarded constant for a tensor from outside the function.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..dtypes import get_dtype
from ..functional.creation import zeros
from ..functional.shape import index_select, reshape, scatter_add
from ..ops.primitive import ShapeError
from ..tensor import Tensor, _to_host, tensor
from .coo import SparseCOOTensor
from .layout import sparse_coo


def sparse_coo_tensor(indices: Any, values: Any, size: Sequence[int] | None = None, dtype: Any = None,
                      device: Any = None, requires_grad: bool = False, check_invariants: bool | None = None,
                      is_coalesced: bool | None = None) -> SparseCOOTensor:
    """A COO sparse tensor with ``values[k]`` at ``indices[:, k]`` (duplicates add up).

    `indices` is an integer array of shape ``(sparse_dim, nnz)`` (a tensor, NumPy array or
    nested list); `values` has shape ``(nnz, *dense_dims)``. Without `size`, each sparse dim
    is one more than its largest index. With ``requires_grad=True`` the values become a
    leaf whose gradient ``s.grad`` holds; values that already require grad keep their graph.
    Indices are always checked against the size (`check_invariants` is accepted and
    ignored); ``is_coalesced=True`` promises sorted unique indices, and is checked too.

    >>> s = kiln.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3))
    >>> s.to_dense().tolist()
    [[0.0, 0.0, 3.0], [4.0, 0.0, 5.0]]
    """
    idx = _index_tensor(indices)
    vals = values if isinstance(values, Tensor) else tensor(values, dtype=dtype)
    if dtype is not None:
        vals = vals.to(get_dtype(dtype))
    if device is not None:
        vals = vals.to(device)
    if idx.device != vals.device:
        idx = idx.to(vals.device)
    if vals.ndim == 0:
        raise ShapeError("sparse_coo_tensor: values must have a leading nnz dim, got a 0-d tensor; pass "
                         "values of shape (nnz, *dense_dims), e.g. values.reshape(1)")
    nnz, sparse_dim = int(idx.shape[1]), int(idx.shape[0])
    if vals.shape[0] != nnz:
        raise ShapeError(f"sparse_coo_tensor: indices give {nnz} entries (shape {tuple(idx.shape)}) but values give "
                         f"{vals.shape[0]} (shape {tuple(vals.shape)}); both need the same nnz")
    dense_shape = tuple(vals.shape[1:])
    host = _to_host(idx._concrete("sparse_coo_tensor"))
    if size is None:
        sparse_shape = tuple(int(m) + 1 for m in host.max(axis=1)) if nnz else (0,) * sparse_dim
        size = sparse_shape + dense_shape
    size = _check_size(tuple(int(d) for d in size), sparse_dim, dense_shape)
    _check_in_range(host, size[:sparse_dim])
    if requires_grad:
        if not vals.is_floating_point():
            raise TypeError(f"sparse_coo_tensor(requires_grad=True) needs floating point values, got "
                            f"{vals.dtype.name}; pass dtype=kiln.float32")
        vals = vals.detach().requires_grad_(True)
    coalesced = nnz <= 1
    if is_coalesced:
        _check_sorted_unique(host, size[:sparse_dim])
        coalesced = True
    return SparseCOOTensor(idx, vals, size, coalesced)


def _index_tensor(indices: Any) -> Tensor:
    idx = indices if isinstance(indices, Tensor) else tensor(np.asarray(indices))
    if idx._data.dtype.kind not in "iu":
        raise TypeError(f"sparse_coo_tensor: indices must be integers, got {idx.dtype.name}; convert them "
                        "with .long() (or np.int64)")
    if idx.ndim != 2:
        raise ShapeError(f"sparse_coo_tensor: indices must have shape (sparse_dim, nnz), got {tuple(idx.shape)}; "
                         "for a vector pass [[i0, i1, ...]], and transpose (nnz, sparse_dim) pairs with .T")
    return idx if idx.dtype == get_dtype("int64") else idx.long()


def _check_size(size: tuple, sparse_dim: int, dense_shape: tuple) -> tuple:
    if len(size) != sparse_dim + len(dense_shape) or size[sparse_dim:] != dense_shape:
        raise ShapeError(f"sparse_coo_tensor: size {size} does not fit {sparse_dim} sparse dims (the rows of the "
                         f"indices) followed by the dense dims of the values {dense_shape}; pass a size of length "
                         f"{sparse_dim + len(dense_shape)} that ends with {dense_shape}")
    if any(d < 0 for d in size):
        raise ValueError(f"sparse_coo_tensor: size {size} has a negative dim")
    return size


def _check_in_range(host: np.ndarray, sparse_shape: tuple) -> None:
    if not host.size:
        return
    low, high = host.min(axis=1), host.max(axis=1)
    for d, (lo, hi, n) in enumerate(zip(low, high, sparse_shape)):
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise IndexError(f"sparse_coo_tensor: index {int(bad)} in sparse dim {d} is out of range for size "
                             f"{sparse_shape[d]} (indices must lie in [0, {sparse_shape[d]})); fix the indices or "
                             "pass a larger size")


def _check_sorted_unique(host: np.ndarray, sparse_shape: tuple) -> None:
    lin = _host_linear(host, sparse_shape)
    if lin.size > 1 and not np.all(np.diff(lin) > 0):
        raise ValueError("sparse_coo_tensor(is_coalesced=True): the indices are not sorted and unique; leave "
                         "is_coalesced out and call .coalesce()")


def _host_linear(host: np.ndarray, sparse_shape: tuple) -> np.ndarray:
    """Row-major linear position of each entry in the sparse dims, in NumPy."""
    strides = np.array([math.prod(sparse_shape[d + 1:]) for d in range(len(sparse_shape))], dtype=np.int64)
    return strides @ host.astype(np.int64) if len(sparse_shape) else np.zeros(host.shape[1], dtype=np.int64)


def _linear(indices: Tensor, sparse_shape: tuple) -> Tensor:
    """Row-major linear position of each entry in the sparse dims, in kiln ops (traceable)."""
    strides = [math.prod(sparse_shape[d + 1:]) for d in range(len(sparse_shape))]
    col = reshape(tensor(strides, dtype="int64", device=indices.device), (len(strides), 1))
    return (indices * col).sum(0)


def _spread(index: Tensor, like: Tensor) -> Tensor:
    """`index` (one per entry) repeated along the dense dims of `like` (for scatter_add)."""
    return reshape(index, (index.shape[0],) + (1,) * (like.ndim - 1)).expand(*like.shape)


def to_dense(s: SparseCOOTensor) -> Tensor:
    """The dense tensor of `s`: its values scatter-added into zeros (dense, duplicates summed; differentiable
    w.r.t. the values). Also the method ``s.to_dense()``.

    >>> kiln.sparse_coo_tensor([[0, 0]], [1.0, 2.0], (2,)).to_dense().tolist()
    [3.0, 0.0]
    """
    sd = s.sparse_dim()
    sparse_shape, dense_shape = s.shape[:sd], s.shape[sd:]
    vals = s._vals
    lin = _linear(s._idx, sparse_shape)
    flat = zeros(math.prod(sparse_shape), *dense_shape, dtype=vals.dtype, device=vals.device)
    return reshape(scatter_add(flat, 0, _spread(lin, vals), vals), s.shape)


def coalesce(s: SparseCOOTensor) -> SparseCOOTensor:
    """`s` with sorted unique indices, the values of duplicates summed (in their stored order)."""
    if s._coalesced:
        return s
    sd = s.sparse_dim()
    sparse_shape = s.shape[:sd]
    lin = _host_linear(_to_host(s._idx._concrete("coalesce")), sparse_shape)
    vals = s._vals
    if np.all(np.diff(lin) > 0):
        return SparseCOOTensor(s._idx, vals, s._size, True)  # already sorted and unique
    unique, inverse = np.unique(lin, return_inverse=True)
    dev = vals.device
    if sd:
        new_idx = np.stack(np.unravel_index(unique, sparse_shape)).astype(np.int64).reshape(sd, -1)
    else:
        new_idx = np.zeros((0, unique.size), dtype=np.int64)
    idx = tensor(new_idx, device=dev)
    target = tensor(inverse.reshape(-1).astype(np.int64), device=dev)
    summed = zeros(int(unique.size), *vals.shape[1:], dtype=vals.dtype, device=dev)
    return SparseCOOTensor(idx, scatter_add(summed, 0, _spread(target, vals), vals), s._size, True)


def dense_to_sparse(x: Tensor, sparse_dim: int | None = None, *, layout: Any = None,
                    dense_dim: int | None = None) -> SparseCOOTensor:
    """``x.to_sparse()``: the nonzero entries of `x` as a coalesced COO tensor (differentiable w.r.t. `x`).

    The first `sparse_dim` dims (all, by default) are addressed by indices; an entry is kept
    where any element of its trailing dense block is nonzero (NaN counts as nonzero).

    >>> kiln.tensor([[0.0, 2.0], [3.0, 0.0]]).to_sparse().values().tolist()
    [2.0, 3.0]
    """
    if layout is not None and layout is not sparse_coo:
        raise ValueError(f"to_sparse(layout={layout!r}): kiln has the COO layout only; pass layout=kiln.sparse_coo "
                         "or leave it out")
    if not isinstance(x, Tensor):
        raise TypeError(f"to_sparse expects a kiln.Tensor, got {type(x).__name__}")
    sd = _sparse_dims(x.ndim, sparse_dim, dense_dim)
    sparse_shape, dense_shape = tuple(x.shape[:sd]), tuple(x.shape[sd:])
    if sd == 0:
        return SparseCOOTensor(tensor(np.zeros((0, 1), dtype=np.int64), device=x.device),
                               reshape(x, (1,) + dense_shape), tuple(x.shape), True)
    data = _to_host(x._concrete("to_sparse"))
    keep = (data != 0).reshape(math.prod(sparse_shape), -1).any(axis=1)
    lin = np.flatnonzero(keep)
    idx = np.stack(np.unravel_index(lin, sparse_shape)).astype(np.int64).reshape(sd, -1)
    flat = reshape(x, (math.prod(sparse_shape),) + dense_shape)
    vals = index_select(flat, 0, tensor(lin.astype(np.int64), device=x.device))
    return SparseCOOTensor(tensor(idx, device=x.device), vals, tuple(x.shape), True)


def _sparse_dims(ndim: int, sparse_dim: int | None, dense_dim: int | None) -> int:
    if sparse_dim is not None and dense_dim is not None:
        raise ValueError("to_sparse: pass sparse_dim or dense_dim, not both")
    sd = ndim if sparse_dim is None else int(sparse_dim)
    if dense_dim is not None:
        sd = ndim - int(dense_dim)
    if not 0 <= sd <= ndim:
        raise ValueError(f"to_sparse: sparse_dim must lie in [0, {ndim}] for a {ndim}-d tensor, got {sd}")
    return sd
