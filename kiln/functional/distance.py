"""Distances between batches of vectors: pairwise_distance and cosine_similarity."""
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
