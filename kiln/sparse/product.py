"""Sparse-dense matrix products: `mm` (= `spmm`) and `matmul`.

``sparse @ dense`` is computed without densifying the sparse operand: the rows of the
dense matrix that the entries' column indices pick are gathered (an ``index_select``),
scaled by the entries' values, and scatter-added into the output rows (``scatter_add``).
The work is O(nnz * columns). These are ordinary kiln ops, so gradients reach the dense
operand and the sparse values, and kiln.compile traces the product. The sum is
deterministic: entries are added into each output row in their stored order.
``dense @ sparse`` is computed as ``(sparse.t() @ dense.t()).t()``.
"""
from __future__ import annotations

from typing import Any

from ..dtypes import DTypeMismatchError
from ..functional.creation import zeros
from ..functional.math import matmul as dense_matmul
from ..functional.shape import bind_index, reshape, scatter_add_unchecked, transpose
from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .coo import SparseCOOTensor, _describe


def mm(sparse: Any, dense: Any) -> Tensor:
    """The matrix product of a 2-D sparse matrix and a dense matrix (or vector); a dense result.

    Two dense operands give their ordinary product (as PyTorch's ``sparse.mm`` does).

    >>> a = kiln.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> kiln.sparse.mm(a, kiln.ones(2, 1)).tolist()
    [[2.0], [3.0]]
    """
    return matmul(sparse, dense)


def spmm(sparse: Any, dense: Any) -> Tensor:
    """``kiln.spmm``: the same as `mm` (PyTorch's older name)."""
    return matmul(sparse, dense)


def matmul(a: Any, b: Any) -> Tensor:
    """``a @ b`` where either operand may be sparse (2-D, no dense dims) and the other dense (1-D or 2-D)."""
    a_sparse, b_sparse = isinstance(a, SparseCOOTensor), isinstance(b, SparseCOOTensor)
    if a_sparse and b_sparse:
        raise TypeError(f"sparse @ sparse is not supported in kiln; densify one operand: "
                        f"a @ b.to_dense() (shapes {a.shape} and {b.shape})")
    if a_sparse:
        return _sparse_dense(a, _dense_operand(b, "right"))
    if b_sparse:
        a = _dense_operand(a, "left")
        if a.ndim == 1:
            return _sparse_dense(b.t(), a)
        return transpose(_sparse_dense(b.t(), transpose(a, 0, 1)), 0, 1)
    return dense_matmul(a, b)


def rmatmul(sparse: Any, other: Any) -> Tensor:
    """``other @ sparse`` (the sparse tensor's ``__rmatmul__``)."""
    return matmul(other, sparse)


def _dense_operand(x: Any, side: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"sparse matmul: the {side} operand must be a kiln.Tensor, got {_describe(x)}; "
                        "wrap it with kiln.tensor(...)")
    if x.ndim not in (1, 2):
        raise ShapeError(f"sparse matmul: the dense operand must be 1-D or 2-D, got shape {tuple(x.shape)}; "
                         "batched sparse products are not supported (loop over the batch)")
    return x


def _sparse_dense(s: SparseCOOTensor, d: Tensor) -> Tensor:
    """``s @ d`` for a 2-D sparse `s` without dense dims: gather, scale, scatter-add (see the module doc)."""
    if s.sparse_dim() != 2 or s.dense_dim() != 0:
        raise ShapeError(f"sparse matmul: the sparse operand must be a 2-D matrix without dense dims, got shape "
                         f"{s.shape} with sparse_dim {s.sparse_dim()}")
    rows, inner = s.shape
    if d.shape[0] != inner:
        raise ShapeError(f"sparse matmul: shapes {s.shape} and {tuple(d.shape)} do not align (inner dimensions "
                         f"{inner} and {d.shape[0]} differ)")
    if d.dtype != s.dtype:
        raise DTypeMismatchError(f"sparse matmul: the sparse operand is {s.dtype.name} but the dense one is "
                                 f"{d.dtype.name}; convert one with .to({s.dtype.name}) or .to({d.dtype.name})")
    vector = d.ndim == 1
    dense = reshape(d, (inner, 1)) if vector else d
    cols = dense.shape[1]
    nnz = s._nnz()
    # (the indices were checked against the shape when the sparse tensor was made: no range check per product)
    picked = bind_index(dense, [s._idx[1]], (("t",), ("s", None, None, None)))  # (nnz, cols): each entry's row
    scaled = picked * reshape(s._vals, (nnz, 1))
    target = reshape(s._idx[0], (nnz, 1)).expand(nnz, cols)
    out = scatter_add_unchecked(zeros(rows, cols, dtype=d.dtype, device=d.device), 0, target, scaled)
    return reshape(out, (rows,)) if vector else out
