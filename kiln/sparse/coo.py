"""`SparseCOOTensor`: a sparse tensor in coordinate (COO) format.

It holds two ordinary kiln tensors and a size: ``indices`` (int64, shape
``(sparse_dim, nnz)``) and ``values`` (shape ``(nnz, *dense_dims)``). Every operation on
it is written in kiln ops on those two tensors, so autograd reaches ``values`` (and any
tensor they were computed from) and kiln.compile traces through it. It is a dataclass, so
a compiled function may take one as an argument: its indices and values become inputs,
its size a static part of the cache key.

Unlike PyTorch, a sparse tensor is not a ``kiln.Tensor`` (``isinstance`` is False); it
has the attributes graph code reads (``is_sparse``, ``layout``, ``shape``, ``dtype``,
``device``, ``requires_grad``, ``grad``) and the methods below. The methods that build on this
class, ``to_dense()``, ``coalesce()``, ``mm()``, ``matmul()`` and ``@``, are attached by kiln.sparse
from build.py and product.py, which import this module.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..dtypes import DType
from ..functional.shape import cat, flip
from ..tensor import Tensor
from .layout import Layout, sparse_coo


@dataclasses.dataclass(eq=False, repr=False)
class SparseCOOTensor:
    """A COO sparse tensor; build one with `kiln.sparse_coo_tensor` or ``dense.to_sparse()``.

    >>> s = kiln.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2))
    >>> s.to_dense().tolist()
    [[0.0, 2.0], [3.0, 0.0]]
    """

    _idx: Tensor
    _vals: Tensor
    _size: tuple
    _coalesced: bool = False

    # ---- metadata --------------------------------------------------------------------
    is_sparse = True

    @property
    def layout(self) -> Layout:
        return sparse_coo

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._size)

    def size(self, dim: int | None = None) -> Any:
        """The shape, or the length of dimension `dim`."""
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return len(self._size)

    @property
    def ndim(self) -> int:
        return len(self._size)

    def sparse_dim(self) -> int:
        """How many leading dims the indices address."""
        return int(self._idx.shape[0])

    def dense_dim(self) -> int:
        """How many trailing dims each stored value has."""
        return self.ndim - self.sparse_dim()

    def _nnz(self) -> int:
        """The number of stored entries (duplicates counted until `coalesce`)."""
        return int(self._vals.shape[0])

    def numel(self) -> int:
        n = 1
        for d in self._size:
            n *= d
        return n

    def __len__(self) -> int:
        if not self._size:
            raise TypeError("len() of a 0-d tensor")
        return int(self._size[0])

    @property
    def dtype(self) -> DType:
        return self._vals.dtype

    @property
    def device(self) -> Any:
        return self._vals.device

    @property
    def is_cuda(self) -> bool:
        return self._vals.is_cuda

    def is_floating_point(self) -> bool:
        return self._vals.is_floating_point()

    # ---- the stored entries -----------------------------------------------------------
    def is_coalesced(self) -> bool:
        """Whether the indices are sorted and unique (as `coalesce` leaves them)."""
        return self._coalesced

    def _check_coalesced(self, what: str) -> None:
        if not self._coalesced:
            raise ValueError(f"{what}() needs a coalesced sparse tensor (sorted, unique indices), but this one "
                             f"may hold duplicates; call .coalesce() first, or ._{what}() for the raw entries")

    def indices(self) -> Tensor:
        """The int64 indices, shape ``(sparse_dim, nnz)``, of a coalesced tensor.

        >>> kiln.tensor([[0.0, 5.0]]).to_sparse().indices().tolist()
        [[0], [1]]
        """
        self._check_coalesced("indices")
        return self._idx

    def values(self) -> Tensor:
        """The stored values, shape ``(nnz, *dense_dims)``, of a coalesced tensor (differentiable)."""
        self._check_coalesced("values")
        return self._vals

    def _indices(self) -> Tensor:
        """The stored indices as they are, duplicates included."""
        return self._idx

    def _values(self) -> Tensor:
        """The stored values as they are, duplicates included."""
        return self._vals

    # ---- autograd ---------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._vals.requires_grad

    def requires_grad_(self, requires_grad: bool = True) -> SparseCOOTensor:
        """Make the stored values a leaf that collects gradients (see `grad`)."""
        self._vals.requires_grad_(requires_grad)
        return self

    @property
    def is_leaf(self) -> bool:
        return self._vals.is_leaf

    @property
    def grad(self) -> SparseCOOTensor | None:
        """The gradient for each stored entry, as a sparse tensor with these indices (None before backward).

        For a coalesced tensor this is PyTorch's sparse gradient; for one with duplicates,
        each duplicate gets its own gradient.
        """
        g = self._vals.grad
        return None if g is None else SparseCOOTensor(self._idx, g, self._size, self._coalesced)

    @grad.setter
    def grad(self, value: Any) -> None:
        if value is not None and not isinstance(value, SparseCOOTensor):
            raise TypeError(f"the grad of a sparse tensor must be None or a sparse tensor, got "
                            f"{type(value).__name__}")
        self._vals.grad = None if value is None else value._vals

    def detach(self) -> SparseCOOTensor:
        """The same entries, cut from the autograd graph."""
        return SparseCOOTensor(self._idx, self._vals.detach(), self._size, self._coalesced)

    # ---- conversions -------------------------------------------------------------------
    def to_sparse(self, sparse_dim: int | None = None) -> SparseCOOTensor:
        """Already sparse: returns itself."""
        if sparse_dim is not None and sparse_dim != self.sparse_dim():
            raise ValueError(f"to_sparse({sparse_dim}): this sparse tensor has sparse_dim {self.sparse_dim()}; "
                             "convert with .to_dense().to_sparse(sparse_dim)")
        return self

    def to(self, *args: Any, **kwargs: Any) -> SparseCOOTensor:
        """Convert dtype and/or device like ``Tensor.to``: ``s.to(kiln.float64)``, ``s.to("cpu")``."""
        vals = self._vals.to(*args, **kwargs)
        idx = self._idx if vals.device == self._idx.device else self._idx.to(vals.device)
        if vals is self._vals and idx is self._idx:
            return self
        return SparseCOOTensor(idx, vals, self._size, self._coalesced)

    def cpu(self) -> SparseCOOTensor:
        return self.to("cpu")

    def cuda(self) -> SparseCOOTensor:
        return self.to("cuda")

    def float(self) -> SparseCOOTensor:
        return self.to("float32")

    def double(self) -> SparseCOOTensor:
        return self.to("float64")

    def t(self) -> SparseCOOTensor:
        """The transpose of a 2-D sparse matrix (its index rows swapped)."""
        if self.sparse_dim() != 2 or self.dense_dim() != 0:
            raise ValueError(f"t() expects a 2-D sparse matrix without dense dims, got shape {self.shape} with "
                             f"sparse_dim {self.sparse_dim()}")
        return SparseCOOTensor(flip(self._idx, 0), self._vals, (self._size[1], self._size[0]))

    # ---- arithmetic --------------------------------------------------------------------
    def _scaled(self, factor: Any, op: str) -> SparseCOOTensor:
        if isinstance(factor, SparseCOOTensor) or (isinstance(factor, Tensor) and factor.ndim != 0):
            raise TypeError(f"sparse {op} supports a Python number or a 0-d tensor, got "
                            f"{_describe(factor)}; convert with .to_dense() first")
        vals = self._vals * factor if op == "*" else self._vals / factor
        return SparseCOOTensor(self._idx, vals, self._size, self._coalesced)

    def __mul__(self, other: Any) -> SparseCOOTensor:
        return self._scaled(other, "*")

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> SparseCOOTensor:
        return self._scaled(other, "/")

    def __neg__(self) -> SparseCOOTensor:
        return SparseCOOTensor(self._idx, -self._vals, self._size, self._coalesced)

    def __add__(self, other: Any) -> SparseCOOTensor:
        """sparse + sparse: the entries of both, uncoalesced. A dense operand goes on the left."""
        if not isinstance(other, SparseCOOTensor):
            raise TypeError(f"sparse + {_describe(other)} is not supported (as in PyTorch); write "
                            "sparse.to_dense() + dense for a dense sum")
        if other.shape != self.shape or other.sparse_dim() != self.sparse_dim():
            raise ValueError(f"sparse + sparse needs equal sizes and sparse_dim, got {self.shape} "
                             f"(sparse_dim {self.sparse_dim()}) and {other.shape} (sparse_dim {other.sparse_dim()})")
        return SparseCOOTensor(cat([self._idx, other._idx], 1), cat([self._vals, other._vals], 0), self._size)

    def __sub__(self, other: Any) -> SparseCOOTensor:
        if not isinstance(other, SparseCOOTensor):
            return self.__add__(other)  # raises, naming the fix
        return self.__add__(-other)

    def __radd__(self, other: Any) -> Tensor:
        """dense + sparse: a dense tensor, as in PyTorch."""
        if not isinstance(other, Tensor):
            return NotImplemented
        return other + self.to_dense()

    def __rsub__(self, other: Any) -> Tensor:
        if not isinstance(other, Tensor):
            return NotImplemented
        return other - self.to_dense()

    def __repr__(self) -> str:
        pad = " " * len("tensor(indices=")
        idx = repr(self._idx).replace("\n", "\n" + pad)
        vals = repr(self._vals).replace("\n", "\n" + " " * len("       values="))
        return (f"tensor(indices={idx},\n       values={vals},\n       size={self.shape}, nnz={self._nnz()}, "
                f"layout=kiln.sparse_coo)")


def _describe(x: Any) -> str:
    if isinstance(x, SparseCOOTensor):
        return f"a sparse tensor of shape {x.shape}"
    if isinstance(x, Tensor):
        return f"a dense tensor of shape {tuple(x.shape)}"
    return type(x).__name__
