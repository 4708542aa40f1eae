"""Margin and embedding losses: soft_margin, margin_ranking, hinge_embedding, cosine_embedding,
multilabel_soft_margin, multilabel_margin and multi_margin."""
from __future__ import annotations

from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .activations import softplus
from .checks import checked_index, checked_targets
from .creation import arange
from .math import (add, cast, cumsum, div, eq, logical_and, logical_not, mean, mul, ne, neg, relu, rsqrt, sub,
                   sum, where)
from .reduction import check_reduction, legacy_reduction, reduce_loss
from .shape import gather_unchecked, squeeze, unsqueeze


def _reduction(op: str, size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    return check_reduction(legacy_reduction(size_average, reduce, reduction), op)


def soft_margin_loss(input: Tensor, target: Tensor, size_average: bool | None = None,  # noqa: A002
                     reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """Two-class logistic loss log(1 + exp(-target * input)) for targets of +1 / -1.

    >>> kiln.nn.functional.soft_margin_loss(kiln.randn(4), kiln.tensor([1.0, -1, 1, -1]))
    """
    reduction = _reduction("soft_margin_loss", size_average, reduce, reduction)
    return reduce_loss(softplus(neg(mul(target, input))), reduction)


def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                        size_average: bool | None = None, reduce: bool | None = None,
                        reduction: str = "mean") -> Tensor:
    """max(0, -target * (input1 - input2) + margin): target 1 wants input1 ranked higher, -1 input2.

    >>> kiln.nn.functional.margin_ranking_loss(kiln.randn(4), kiln.randn(4), kiln.tensor([1.0, -1, 1, 1]))
    """
    reduction = _reduction("margin_ranking_loss", size_average, reduce, reduction)
    if not input1.ndim == input2.ndim == target.ndim:
        raise ShapeError(f"margin_ranking_loss: input1, input2 and target must have the same number of dims, got "
                         f"shapes {tuple(input1.shape)}, {tuple(input2.shape)} and {tuple(target.shape)}")
    return reduce_loss(relu(add(neg(mul(target, sub(input1, input2))), margin)), reduction)


def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0,  # noqa: A002
                         size_average: bool | None = None, reduce: bool | None = None,
                         reduction: str = "mean") -> Tensor:
    """`input` (a distance) where target is 1, max(0, margin - input) where target is -1.

    >>> kiln.nn.functional.hinge_embedding_loss(kiln.rand(4), kiln.tensor([1.0, -1, 1, -1]))
    """
    reduction = _reduction("hinge_embedding_loss", size_average, reduce, reduction)
    pull = where(ne(target, -1.0), input, 0.0)
    push = where(ne(target, 1.0), relu(sub(margin, input)), 0.0)
    return reduce_loss(add(pull, push), reduction)


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                          size_average: bool | None = None, reduce: bool | None = None,
                          reduction: str = "mean") -> Tensor:
    """1 - cos(input1, input2) where target is 1, max(0, cos - margin) where target is -1.

    Inputs are (N, D) with an (N,) target, or (D,) with a 0-d target.

    >>> kiln.nn.functional.cosine_embedding_loss(kiln.randn(3, 5), kiln.randn(3, 5), kiln.tensor([1.0, -1, 1]))
    """
    reduction = _reduction("cosine_embedding_loss", size_average, reduce, reduction)
    if input1.ndim not in (1, 2) or input2.ndim != input1.ndim or target.ndim != input1.ndim - 1:
        raise ShapeError(f"cosine_embedding_loss: expects inputs of shape (N, D) with a target of shape (N,), or "
                         f"(D,) with a 0-d target; got {tuple(input1.shape)}, {tuple(input2.shape)} and target "
                         f"{tuple(target.shape)}")
    eps = 1e-12
    dot = sum(mul(input1, input2), -1)
    norms = mul(add(sum(mul(input1, input1), -1), eps), add(sum(mul(input2, input2), -1), eps))
    cos = mul(dot, rsqrt(norms))
    loss = add(where(eq(target, 1.0), sub(1.0, cos), 0.0), where(eq(target, -1.0), relu(sub(cos, margin)), 0.0))
    return reduce_loss(loss, reduction)


def multilabel_soft_margin_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                                size_average: bool | None = None, reduce: bool | None = None,
                                reduction: str = "mean") -> Tensor:
    """Per-class logistic loss on (N, C) logits against 0/1 targets, averaged over the C classes.

    >>> kiln.nn.functional.multilabel_soft_margin_loss(kiln.randn(2, 3), kiln.tensor([[1.0, 0, 1], [0, 0, 1]]))
    """
    reduction = _reduction("multilabel_soft_margin_loss", size_average, reduce, reduction)
    # -(t log sigmoid(x) + (1 - t) log sigmoid(-x)) = t softplus(-x) + (1 - t) softplus(x)
    loss = add(mul(target, softplus(neg(input))), mul(sub(1.0, target), softplus(input)))
    if weight is not None:
        loss = mul(loss, weight)
    return reduce_loss(mean(loss, -1), reduction)


def _class_scores(op: str, input: Tensor, target: Tensor,  # noqa: A002
                  target_ndim: int) -> tuple[Tensor, Tensor, bool]:
    """`input` as (N, C) and `target` batched to match; whether the input came unbatched."""
    if input.ndim not in (1, 2) or input.numel() == 0:
        raise ShapeError(f"{op}: expects a non-empty (C,) or (N, C) input, got shape {tuple(input.shape)}")
    if target.dtype.is_floating_point or target.dtype.name == "bool":
        raise TypeError(f"{op}: target must hold class indices (int64), got {target.dtype.name}; "
                        f"convert it with target.long()")
    unbatched = input.ndim == 1
    if unbatched:
        input, target = unsqueeze(input, 0), unsqueeze(target, 0) if target.ndim == target_ndim - 1 else target
    return input, target, unbatched


def multilabel_margin_loss(input: Tensor, target: Tensor, size_average: bool | None = None,  # noqa: A002
                           reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """Hinge loss between each target class and each other class, for multi-label (N, C) scores.

    Each target row lists class indices and ends at its first -1 (the rest is ignored).

    >>> kiln.nn.functional.multilabel_margin_loss(kiln.randn(1, 4), kiln.tensor([[3, 0, -1, 1]]))
    """
    reduction = _reduction("multilabel_margin_loss", size_average, reduce, reduction)
    op = "multilabel_margin_loss"
    x, t, unbatched = _class_scores(op, input, target, 2)
    if tuple(t.shape) != tuple(x.shape):
        raise ShapeError(f"{op}: target must have the input's shape {tuple(input.shape)}, got {tuple(target.shape)}")
    n_classes = x.shape[1]
    t = checked_targets(op, t, n_classes, -1)
    listed = eq(cumsum(cast(eq(t, -1), "int64"), 1), 0)  # positions before the first -1
    safe = where(listed, t, 0)
    hits = logical_and(eq(unsqueeze(safe, 2), arange(n_classes, device=x.device)), unsqueeze(listed, 2))
    is_target = ne(sum(cast(hits, "int64"), 1), 0)  # (N, C): the class is listed
    picked = gather_unchecked(x, 1, safe)  # (N, C): score of the j-th listed class
    hinge = relu(add(sub(1.0, unsqueeze(picked, 2)), unsqueeze(x, 1)))  # (N, j, k)
    keep = logical_and(unsqueeze(listed, 2), unsqueeze(logical_not(is_target), 1))
    loss = div(sum(where(keep, hinge, 0.0), (1, 2)), n_classes)
    return squeeze(loss, 0) if unbatched and reduction == "none" else reduce_loss(loss, reduction)


def multi_margin_loss(input: Tensor, target: Tensor, p: int = 1, margin: float = 1.0,  # noqa: A002
                      weight: Tensor | None = None, size_average: bool | None = None,
                      reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """Multi-class hinge loss: sum over classes i != y of max(0, margin - x[y] + x[i])^p / C.

    >>> kiln.nn.functional.multi_margin_loss(kiln.randn(3, 4), kiln.tensor([0, 3, 1]))
    """
    reduction = _reduction("multi_margin_loss", size_average, reduce, reduction)
    op = "multi_margin_loss"
    if p not in (1, 2):
        raise ValueError(f"{op}: only p=1 and p=2 are supported, got p={p}")
    x, t, unbatched = _class_scores(op, input, target, 1)
    n_classes = x.shape[1]
    if t.ndim != 1 or t.shape[0] != x.shape[0]:
        raise ShapeError(f"{op}: input of shape {tuple(input.shape)} needs a target of shape "
                         f"{tuple(input.shape[:-1])}, got {tuple(target.shape)}")
    if weight is not None and (weight.ndim != 1 or weight.shape[0] != n_classes):
        raise ShapeError(f"{op}: weight must have shape ({n_classes},), one per class, got {tuple(weight.shape)}")
    t = checked_index(op, t, x, 1)
    column = unsqueeze(t, 1)
    hinge = relu(add(sub(margin, gather_unchecked(x, 1, column)), x))  # (N, C)
    if p == 2:
        hinge = mul(hinge, hinge)
    if weight is not None:
        hinge = mul(hinge, gather_unchecked(unsqueeze(weight, 0).expand(t.shape[0], n_classes), 1, column))
    others = ne(unsqueeze(arange(n_classes, device=x.device), 0), column)
    loss = div(sum(where(others, hinge, 0.0), 1), n_classes)
    return squeeze(loss, 0) if unbatched and reduction == "none" else reduce_loss(loss, reduction)
