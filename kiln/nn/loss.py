"""Loss layers, base classes and the element-wise losses: CrossEntropyLoss, NLLLoss, MSELoss, L1Loss,
SmoothL1Loss, HuberLoss, BCELoss, BCEWithLogitsLoss. Margin losses are in loss_margin.py, distribution
losses in loss_probabilistic.py."""
from __future__ import annotations

from .. import functional as F
from ..functional.reduction import REDUCTIONS, legacy_reduction
from ..tensor import Tensor
from .module import Module

_REDUCTIONS = REDUCTIONS


class _Loss(Module):
    """Holds and validates `reduction` ('mean' | 'sum' | 'none'); the deprecated `size_average` and
    `reduce` flags, when given, choose it instead (with a warning), as in PyTorch."""

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__()
        reduction = legacy_reduction(size_average, reduce, reduction)
        if reduction not in self._allowed_reductions():
            raise ValueError(f"{type(self).__name__}: reduction must be one of {self._allowed_reductions()}, got "
                             f"{reduction!r}; pass reduction='mean' (the default), 'sum' or 'none'")
        self.reduction = reduction

    def _allowed_reductions(self) -> tuple[str, ...]:
        return _REDUCTIONS


class _WeightedLoss(_Loss):
    """A loss with optional per-class weights, kept as the (persistent) buffer ``weight``."""

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class CrossEntropyLoss(_WeightedLoss):
    """Softmax cross-entropy of logits (N, C, ...) against class indices or probabilities.

    >>> kiln.nn.CrossEntropyLoss()(kiln.randn(4, 10), kiln.tensor([1, 0, 9, 3]))
    """

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None, ignore_index: int = -100,
                 reduce: bool | None = None, reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of class indices under log-probabilities (N, C, ...).

    >>> kiln.nn.NLLLoss()(kiln.nn.functional.log_softmax(kiln.randn(4, 3), 1), kiln.tensor([0, 2, 1, 0]))
    """

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None, ignore_index: int = -100,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class MSELoss(_Loss):
    """Mean squared error.

    >>> kiln.nn.MSELoss()(kiln.randn(3, 2), kiln.randn(3, 2))
    """

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error.

    >>> kiln.nn.L1Loss()(kiln.randn(3, 2), kiln.randn(3, 2))
    """

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """0.5 d^2 / beta where |d| < beta, else |d| - beta / 2.

    >>> kiln.nn.SmoothL1Loss(beta=0.5)(kiln.randn(3, 2), kiln.randn(3, 2))
    """

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean",
                 beta: float = 1.0) -> None:
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """0.5 d^2 where |d| < delta, else delta * (|d| - delta / 2).

    >>> kiln.nn.HuberLoss(delta=2.0)(kiln.randn(3, 2), kiln.randn(3, 2))
    """

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class BCELoss(_WeightedLoss):
    """Binary cross-entropy of probabilities (apply sigmoid first; each log is clamped at -100).

    >>> kiln.nn.BCELoss()(kiln.rand(4), kiln.tensor([1.0, 0.0, 1.0, 1.0]))
    """

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Sigmoid + binary cross-entropy, computed stably from logits.

    >>> kiln.nn.BCEWithLogitsLoss()(kiln.randn(4), kiln.tensor([1.0, 0.0, 1.0, 1.0]))
    """

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean", pos_weight: Tensor | None = None) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                  pos_weight=self.pos_weight)
