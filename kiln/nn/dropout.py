"""Dropout layers: zero activations at random while training; identity in eval mode.

Dropout zeroes single elements; Dropout1d/2d/3d zero whole channels; AlphaDropout and
FeatureAlphaDropout keep a SELU network's mean and variance. Every mask is drawn from kiln's
global counter-based RNG, so compiled code reproduces eager's masks.
"""
from __future__ import annotations

from .. import functional as F
from ..functional.dropouts import check_p
from ..tensor import Tensor
from .module import Module


class _DropoutNd(Module):
    """Holds and validates the drop probability `p` and the `inplace` flag."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        check_p(p)
        self.p = p
        self.inplace = inplace

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """Zero each element with probability `p` and scale survivors by 1/(1-p), only when training.

    >>> kiln.nn.Dropout(0.1)(kiln.ones(4, 8))
    """

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout(input, self.p, self.training)


class Dropout1d(_DropoutNd):
    """Zero whole channels of (N, C, L) or (C, L) inputs with probability `p`, while training.

    >>> kiln.nn.Dropout1d(0.2)(kiln.randn(4, 16, 32))
    """

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout1d(input, self.p, self.training)


class Dropout2d(_DropoutNd):
    """Zero whole channels of (N, C, H, W) inputs with probability `p`, while training.

    >>> kiln.nn.Dropout2d(0.2)(kiln.randn(4, 16, 8, 8))
    """

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout2d(input, self.p, self.training)


class Dropout3d(_DropoutNd):
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) inputs with probability `p`, while training.

    >>> kiln.nn.Dropout3d(0.2)(kiln.randn(2, 4, 3, 8, 8))
    """

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout3d(input, self.p, self.training)


class AlphaDropout(_DropoutNd):
    """Dropout for SELU networks: keeps zero mean and unit variance, while training.

    >>> kiln.nn.AlphaDropout(0.1)(kiln.randn(4, 8))
    """

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.alpha_dropout(input, self.p, self.training)


class FeatureAlphaDropout(_DropoutNd):
    """Alpha dropout of whole channels (dim 1), while training.

    >>> kiln.nn.FeatureAlphaDropout(0.1)(kiln.randn(4, 8, 5))
    """

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.feature_alpha_dropout(input, self.p, self.training)
