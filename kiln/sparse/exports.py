"""The sparse names that ``import kiln`` puts at the top level (PyTorch's ``torch.*`` spellings).

>>> from kiln.sparse.exports import sparse_coo_tensor, spmm
"""
from .build import sparse_coo_tensor
from .layout import Layout as layout
from .layout import sparse_coo, strided
from .product import spmm

__all__ = ["layout", "sparse_coo", "sparse_coo_tensor", "spmm", "strided"]
