"""Distances and norms of batches of vectors: pairwise_distance, cosine_similarity and normalize."""
from __future__ import annotations

from ..tensor import Tensor
from .math import add, clamp, div, mul, norm, sub, sum


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """The p-norm of x1 - x2 + eps over the last dim (eps keeps the gradient finite at x1 == x2).

    >>> kiln.nn.functional.pairwise_distance(kiln.zeros(2, 3), kiln.ones(2, 3))  # about [1.732, 1.732]
    """
    return norm(add(sub(x1, x2), eps), p, -1, keepdim)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """x1 . x2 / (max(|x1|, eps) * max(|x2|, eps)) along `dim`, broadcasting the other dims.

    >>> kiln.nn.functional.cosine_similarity(kiln.randn(4, 8), kiln.randn(4, 8))  # shape (4,)
    """
    n1 = clamp(norm(x1, 2, dim), eps)
    n2 = clamp(norm(x2, 2, dim), eps)
    return div(sum(mul(x1, x2), dim), mul(n1, n2))


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:  # noqa: A002
    """input / max(||input||_p, eps) along `dim`: unit vectors (rows of a batch by default).

    >>> kiln.nn.functional.normalize(kiln.tensor([[3.0, 4.0]]))  # [[0.6, 0.8]]
    """
    return div(input, clamp(norm(input, p, dim, keepdim=True), eps))
