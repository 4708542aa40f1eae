"""Flatten and Unflatten: reshape layers for Sequential models."""
from __future__ import annotations

from typing import Sequence

from ..functional.shape import flatten, reshape
from ..tensor import Tensor
from .module import Module


class Flatten(Module):
    """Flatten dims start_dim..end_dim into one (by default everything but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split dim `dim` into `unflattened_size`."""

    def __init__(self, dim: int, unflattened_size: Sequence[int]) -> None:
        super().__init__()
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        dim = self.dim % input.ndim
        shape = tuple(input.shape[:dim]) + self.unflattened_size + tuple(input.shape[dim + 1:])
        return reshape(input, shape)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
