"""Margin, embedding and triplet loss layers."""
from __future__ import annotations

from typing import Callable

from .. import functional as F
from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .distance import PairwiseDistance
from .loss import _Loss, _WeightedLoss


class SoftMarginLoss(_Loss):
    """Two-class logistic loss log(1 + exp(-y x)) for targets y of +1 / -1.

    >>> kiln.nn.SoftMarginLoss()(kiln.randn(4), kiln.tensor([1.0, -1, 1, -1]))
    """

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class MarginRankingLoss(_Loss):
    """max(0, -y (x1 - x2) + margin): y = 1 wants x1 ranked above x2, y = -1 the reverse.

    >>> kiln.nn.MarginRankingLoss(margin=0.1)(kiln.randn(4), kiln.randn(4), kiln.tensor([1.0, -1, 1, 1]))
    """

    def __init__(self, margin: float = 0.0, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return F.margin_ranking_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    """x where y = 1, max(0, margin - x) where y = -1 (x is usually a distance).

    >>> kiln.nn.HingeEmbeddingLoss()(kiln.rand(4), kiln.tensor([1.0, -1, 1, -1]))
    """

    def __init__(self, margin: float = 1.0, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.hinge_embedding_loss(input, target, margin=self.margin, reduction=self.reduction)


class CosineEmbeddingLoss(_Loss):
    """1 - cos(x1, x2) where y = 1, max(0, cos(x1, x2) - margin) where y = -1.

    >>> kiln.nn.CosineEmbeddingLoss()(kiln.randn(3, 5), kiln.randn(3, 5), kiln.tensor([1.0, -1, 1]))
    """

    def __init__(self, margin: float = 0.0, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return F.cosine_embedding_loss(input1, input2, target, margin=self.margin, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_WeightedLoss):
    """Per-class logistic loss of (N, C) logits against 0/1 multi-label targets, averaged over classes.

    >>> kiln.nn.MultiLabelSoftMarginLoss()(kiln.randn(2, 3), kiln.tensor([[1.0, 0, 1], [0, 0, 1]]))
    """

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.multilabel_soft_margin_loss(input, target, self.weight, reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    """Hinge loss between every listed target class and every other class; rows end at their first -1.

    >>> kiln.nn.MultiLabelMarginLoss()(kiln.randn(1, 4), kiln.tensor([[3, 0, -1, 1]]))
    """

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)


class MultiMarginLoss(_WeightedLoss):
    """Multi-class hinge loss: sum over i != y of max(0, margin - x[y] + x[i])^p / C, for p in {1, 2}.

    >>> kiln.nn.MultiMarginLoss()(kiln.randn(3, 4), kiln.tensor([0, 3, 1]))
    """

    def __init__(self, p: int = 1, margin: float = 1.0, weight: Tensor | None = None,
                 size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean") -> None:
        if p not in (1, 2):
            raise ValueError(f"MultiMarginLoss: only p=1 and p=2 are supported, got p={p}")
        if weight is not None and weight.ndim != 1:
            raise ShapeError(f"MultiMarginLoss: weight must be None or a 1D tensor of per-class weights, got shape "
                             f"{tuple(weight.shape)}")
        super().__init__(weight, size_average, reduce, reduction)
        self.p = p
        self.margin = margin

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.multi_margin_loss(input, target, p=self.p, margin=self.margin, weight=self.weight,
                                   reduction=self.reduction)


class TripletMarginLoss(_Loss):
    """max(0, |a - p|_p - |a - n|_p + margin) over the last dim; `swap` also tries |p - n| as the negative.

    >>> kiln.nn.TripletMarginLoss(margin=0.5)(kiln.randn(4, 8), kiln.randn(4, 8), kiln.randn(4, 8))
    """

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False,
                 size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginLoss: margin must be greater than 0, got {margin}")
        self.margin = margin
        self.p = p
        self.eps = eps
        self.swap = swap

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return F.triplet_margin_loss(anchor, positive, negative, margin=self.margin, p=self.p, eps=self.eps,
                                     swap=self.swap, reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    """Triplet loss under any distance function (pairwise_distance when None).

    >>> loss = kiln.nn.TripletMarginWithDistanceLoss(distance_function=kiln.nn.PairwiseDistance(p=1))
    >>> loss(kiln.randn(4, 8), kiln.randn(4, 8), kiln.randn(4, 8))
    """

    def __init__(self, *, distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
                 margin: float = 1.0, swap: bool = False, reduction: str = "mean") -> None:
        super().__init__(reduction=reduction)
        if margin <= 0:
            raise ValueError(f"TripletMarginWithDistanceLoss: margin must be greater than 0, got {margin}")
        self.distance_function = PairwiseDistance() if distance_function is None else distance_function
        self.margin = margin
        self.swap = swap

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return F.triplet_margin_with_distance_loss(anchor, positive, negative,
                                                   distance_function=self.distance_function, margin=self.margin,
                                                   swap=self.swap, reduction=self.reduction)
