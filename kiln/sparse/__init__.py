"""Sparse COO tensors for graph networks: ``kiln.sparse_coo_tensor``, ``dense.to_sparse()``,
``kiln.spmm`` and ``kiln.sparse.mm``.

A `SparseCOOTensor` holds int64 ``indices`` of shape ``(sparse_dim, nnz)`` and ``values``
of shape ``(nnz, *dense_dims)``. Its products and conversions are written in existing
kiln ops (index_select, scatter_add), so they are differentiable (w.r.t. the dense
operand and the values) and traced by kiln.compile. What is dense inside:

- ``sparse @ dense`` never builds the dense form of the sparse operand: it gathers,
  scales and scatter-adds the nnz entries (see kiln.sparse.product);
- ``to_dense()`` and ``dense + sparse`` build the full dense tensor (as their result is);
- ``coalesce()`` and ``to_sparse()`` find their entries in NumPy on the host (a graph
  break under kiln.compile when the data is a traced input).

Importing this package attaches ``Tensor.to_sparse``, ``Tensor.to_dense`` (a dense tensor
returns itself), ``Tensor.is_sparse`` (False) and ``Tensor.layout`` (``kiln.strided``).

>>> adj = kiln.tensor([[0.0, 1.0], [1.0, 0.0]]).to_sparse()
>>> kiln.sparse.mm(adj, kiln.tensor([[1.0], [2.0]])).tolist()
[[2.0], [1.0]]
"""
from __future__ import annotations

from ..tensor import Tensor
from .build import coalesce, dense_to_sparse, sparse_coo_tensor, to_dense
from .coo import SparseCOOTensor
from .layout import Layout, sparse_coo, strided
from .product import matmul, mm, rmatmul, spmm


def _attach() -> None:
    """The sparse tensor's methods that build on its class (coo.py), and the dense-side hooks (only those Tensor
    does not define already)."""
    methods = {"to_dense": to_dense, "coalesce": coalesce, "mm": mm, "matmul": matmul, "__matmul__": matmul,
               "__rmatmul__": rmatmul}
    for name, method in methods.items():
        setattr(SparseCOOTensor, name, method)
    hooks = {
        "to_sparse": dense_to_sparse,
        "to_dense": lambda self: self,
        "is_sparse": property(lambda self: False),
        "layout": property(lambda self: strided),
    }
    for name, hook in hooks.items():
        if not hasattr(Tensor, name):
            setattr(Tensor, name, hook)


_attach()

__all__ = ["Layout", "SparseCOOTensor", "coalesce", "matmul", "mm", "sparse_coo", "sparse_coo_tensor", "spmm",
           "strided", "to_dense"]
