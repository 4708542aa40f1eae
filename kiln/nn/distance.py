"""Distance layers: PairwiseDistance and CosineSimilarity."""
from __future__ import annotations

from .. import functional as F
from ..tensor import Tensor
from .module import Module


class PairwiseDistance(Module):
    """The p-norm of x1 - x2 + eps over the last dim.

    >>> kiln.nn.PairwiseDistance(p=1)(kiln.zeros(2, 3), kiln.ones(2, 3))  # about [3, 3]
    """

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm = p
        self.eps = eps
        self.keepdim = keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class CosineSimilarity(Module):
    """Cosine of the angle between x1 and x2 along `dim`.

    >>> kiln.nn.CosineSimilarity(dim=1)(kiln.randn(4, 8), kiln.randn(4, 8))  # shape (4,)
    """

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)
