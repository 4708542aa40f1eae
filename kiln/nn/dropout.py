"""Dropout: zero activations at random while training; identity in eval mode."""
from __future__ import annotations

from .. import functional as F
from ..tensor import Tensor
from .module import Module


class Dropout(Module):
    """Zero each element with probability `p` and scale survivors by 1/(1-p), only when training.

    The mask is drawn from kiln's global counter-based RNG, so compiled code can reproduce it.
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout(input, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
