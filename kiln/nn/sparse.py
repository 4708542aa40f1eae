"""Embedding: a lookup table of learnable vectors indexed by integer ids."""
from __future__ import annotations

from typing import Any

from .. import autograd
from .. import functional as F
from ..functional.creation import empty
from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter


class Embedding(Module):
    """weight[idx] for integer `idx` of any shape; weight ~ N(0, 1), the padding row zero.

    The row at `padding_idx` gets no gradient, so it stays a fixed "padding" vector.

    >>> kiln.nn.Embedding(100, 16)(kiln.tensor([[1, 2, 3]])).shape
    (1, 3, 16)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Tensor | None = None, _freeze: bool = False,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise NotImplementedError("Embedding: max_norm, scale_grad_by_freq and sparse are not supported")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx must be within [-{num_embeddings}, "
                                 f"{num_embeddings}), got {padding_idx}")
            padding_idx %= num_embeddings
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype, device=device),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError(f"Embedding: _weight has shape {tuple(_weight.shape)}, expected "
                                 f"({num_embeddings}, {embedding_dim})")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with autograd.no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.embedding(input, self.weight, self.padding_idx)

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True,
                        padding_idx: int | None = None) -> "Embedding":
        """An Embedding holding `embeddings` (2-D); frozen (no grad) unless freeze=False."""
        if embeddings.ndim != 2:
            raise ValueError(f"Embedding.from_pretrained expects a 2-D tensor, got shape {tuple(embeddings.shape)}")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx=padding_idx, _weight=embeddings, _freeze=freeze)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s
