"""Triplet losses: an anchor should lie nearer its positive than its negative, by a margin."""
from __future__ import annotations

from typing import Callable

from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .distance import pairwise_distance
from .math import add, minimum, relu, sub
from .reduction import check_reduction, legacy_reduction, reduce_loss


def _same_ndim(op: str, anchor: Tensor, positive: Tensor, negative: Tensor) -> None:
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise ShapeError(f"{op}: anchor, positive and negative must have the same number of dims, got "
                         f"{anchor.ndim}D, {positive.ndim}D and {negative.ndim}D inputs (shapes "
                         f"{tuple(anchor.shape)}, {tuple(positive.shape)}, {tuple(negative.shape)})")


def _check_margin(op: str, margin: float) -> None:
    if margin <= 0:
        raise ValueError(f"{op}: margin must be greater than 0, got {margin}")


def _triplet(distance: Callable[[Tensor, Tensor], Tensor], anchor: Tensor, positive: Tensor,
             negative: Tensor, margin: float, swap: bool, reduction: str) -> Tensor:
    d_pos = distance(anchor, positive)
    d_neg = distance(anchor, negative)
    if swap:  # the harder of the two negatives' distances
        d_neg = minimum(d_neg, distance(positive, negative))
    return reduce_loss(relu(add(sub(d_pos, d_neg), margin)), reduction)


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0,
                        p: float = 2, eps: float = 1e-6, swap: bool = False, size_average: bool | None = None,
                        reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """max(0, d(a, p) - d(a, n) + margin) with d the p-norm distance over the last dim.

    >>> a, p, n = kiln.randn(4, 8), kiln.randn(4, 8), kiln.randn(4, 8)
    >>> kiln.nn.functional.triplet_margin_loss(a, p, n, margin=0.5)
    """
    reduction = check_reduction(legacy_reduction(size_average, reduce, reduction), "triplet_margin_loss")
    _check_margin("triplet_margin_loss", margin)
    _same_ndim("triplet_margin_loss", anchor, positive, negative)
    return _triplet(lambda x, y: pairwise_distance(x, y, p, eps), anchor, positive, negative, margin, swap,
                    reduction)


def triplet_margin_with_distance_loss(anchor: Tensor, positive: Tensor, negative: Tensor, *,
                                      distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
                                      margin: float = 1.0, swap: bool = False, reduction: str = "mean") -> Tensor:
    """Triplet loss under any distance (`pairwise_distance` when None); `margin` must be > 0.

    >>> dist = lambda x, y: 1 - kiln.nn.functional.cosine_similarity(x, y)
    >>> kiln.nn.functional.triplet_margin_with_distance_loss(kiln.randn(4, 8), kiln.randn(4, 8),
    ...                                                      kiln.randn(4, 8), distance_function=dist)
    """
    op = "triplet_margin_with_distance_loss"
    check_reduction(reduction, op)
    _check_margin(op, margin)
    _same_ndim(op, anchor, positive, negative)
    return _triplet(distance_function or pairwise_distance, anchor, positive, negative, margin, swap, reduction)
