"""Element-wise losses: mse, l1, smooth_l1, huber, binary cross-entropy (on probabilities or logits)."""
from __future__ import annotations

from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .math import abs, add, clamp, div, exp, ge, gt, log, log1p, lt, mul, neg, relu, sub, sum, where
from .random_fill import checked_probability
from .reduction import check_reduction, legacy_reduction, reduce_loss, same_shape


def _weighted(op: str, loss: Tensor, weight: Tensor | None, reduction: str) -> Tensor:
    """Reduce `loss` with optional same-shape weights: 'mean' divides by the total weight."""
    if weight is None:
        return reduce_loss(loss, reduction, op)
    same_shape(op, loss, weight, "weight")
    loss = mul(loss, weight)
    return div(sum(loss), sum(weight)) if reduction == "mean" else reduce_loss(loss, reduction, op)


def mse_loss(input: Tensor, target: Tensor, size_average: bool | None = None,  # noqa: A002
             reduce: bool | None = None, reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
    """Squared error; with `weight`, 'mean' is the weighted mean.

    >>> kiln.nn.functional.mse_loss(kiln.tensor([1.0, 2.0]), kiln.tensor([1.0, 4.0]))  # 2.0
    """
    reduction = check_reduction(legacy_reduction(size_average, reduce, reduction), "mse_loss")
    same_shape("mse_loss", input, target)
    d = sub(input, target)
    return _weighted("mse_loss", mul(d, d), weight, reduction)


def l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None,  # noqa: A002
            reduce: bool | None = None, reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
    """Absolute error; with `weight`, 'mean' is the weighted mean.

    >>> kiln.nn.functional.l1_loss(kiln.tensor([1.0, 2.0]), kiln.tensor([1.0, 4.0]))  # 1.0
    """
    reduction = check_reduction(legacy_reduction(size_average, reduce, reduction), "l1_loss")
    same_shape("l1_loss", input, target)
    return _weighted("l1_loss", abs(sub(input, target)), weight, reduction)


def _quadratic_then_linear(op: str, input: Tensor, target: Tensor, bound: float) -> Tensor:  # noqa: A002
    """0.5 d^2 where |d| < bound, else bound * (|d| - bound / 2): Huber's loss, before any scaling."""
    same_shape(op, input, target)
    d = sub(input, target)
    ad = abs(d)
    return where(lt(ad, bound), mul(mul(d, d), 0.5), mul(sub(ad, 0.5 * bound), bound))


def smooth_l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None,  # noqa: A002
                   reduce: bool | None = None, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5 d^2 / beta where |d| < beta, else |d| - beta / 2 (plain l1 when beta is 0).

    >>> kiln.nn.functional.smooth_l1_loss(kiln.tensor([0.5, 3.0]), kiln.zeros(2))  # (0.125 + 2.5) / 2
    """
    reduction = check_reduction(legacy_reduction(size_average, reduce, reduction), "smooth_l1_loss")
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}; pass beta=0 for plain l1_loss")
    if beta == 0:
        return l1_loss(input, target, reduction=reduction)
    return reduce_loss(div(_quadratic_then_linear("smooth_l1_loss", input, target, beta), beta), reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,  # noqa: A002
               weight: Tensor | None = None) -> Tensor:
    """0.5 d^2 where |d| < delta, else delta * (|d| - delta / 2); `weight` scales each element.

    >>> kiln.nn.functional.huber_loss(kiln.tensor([0.5, 3.0]), kiln.zeros(2), delta=2.0)  # (0.125 + 4) / 2
    """
    check_reduction(reduction, "huber_loss")
    if delta <= 0:
        raise ValueError(f"huber_loss: delta must be > 0, got {delta}")
    loss = _quadratic_then_linear("huber_loss", input, target, delta)
    if weight is not None:
        same_shape("huber_loss", input, weight, "weight")
        loss = mul(loss, weight)
    return reduce_loss(loss, reduction)


def _check_weight_broadcasts(op: str, weight: Tensor, shape: tuple) -> None:
    w = tuple(weight.shape)
    ok = len(w) <= len(shape) and all(a in (1, b) for a, b in zip(w[::-1], shape[::-1]))
    if not ok:
        raise ShapeError(f"{op}: weight of shape {w} does not broadcast to the input shape {shape}; give it the "
                         f"input's shape or one that broadcasts to it")


def _clamped_log(p: Tensor) -> Tensor:
    """log(p) clamped below at -100, with a finite gradient where p is 0."""
    positive = gt(p, 0.0)
    return where(positive, clamp(log(where(positive, p, 1.0)), -100.0), -100.0)


def _bce(p: Tensor, t: Tensor) -> Tensor:
    """Per-element binary cross-entropy. Its gradient in p is (p - t) / max(p (1 - p), 1e-12), as in
    PyTorch: where p (1 - p) is below 1e-12 (p at or next to 0 or 1) the exact terms would give an
    infinite or wrong-signed gradient, so those elements take a surrogate with that gradient."""
    eps = 1e-12
    exact = neg(add(mul(t, _clamped_log(p)), mul(sub(1.0, t), _clamped_log(sub(1.0, p)))))
    pd, td = p.detach(), t.detach()
    edge = add(exact.detach(), mul(sub(p, pd), div(sub(pd, td), eps)))
    if t.requires_grad:
        edge = add(edge, mul(sub(t, td), sub(_clamped_log(sub(1.0, pd)), _clamped_log(pd))))
    return where(ge(mul(pd, sub(1.0, pd)), eps), exact, edge)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                         size_average: bool | None = None, reduce: bool | None = None,
                         reduction: str = "mean") -> Tensor:
    """-(t log p + (1 - t) log(1 - p)) for probabilities `input`, each log clamped at -100.

    >>> kiln.nn.functional.binary_cross_entropy(kiln.tensor([0.9, 0.2]), kiln.tensor([1.0, 0.0]))
    """
    reduction = check_reduction(legacy_reduction(size_average, reduce, reduction), "binary_cross_entropy")
    same_shape("binary_cross_entropy", input, target)
    # a check node while tracing, so a compiled replay raises on NaN or out-of-range inputs as eager does
    input = checked_probability("binary_cross_entropy", input,  # noqa: A001
                                fix="apply sigmoid first, or pass the logits to binary_cross_entropy_with_logits")
    loss = _bce(input, target)
    if weight is not None:
        _check_weight_broadcasts("binary_cross_entropy", weight, tuple(input.shape))
        loss = mul(loss, weight)
    return reduce_loss(loss, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                                     size_average: bool | None = None, reduce: bool | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """Sigmoid + binary cross-entropy in one stable expression; `pos_weight` scales the positive term.

    >>> kiln.nn.functional.binary_cross_entropy_with_logits(kiln.tensor([2.0, -1.0]), kiln.tensor([1.0, 0.0]))
    """
    reduction = check_reduction(legacy_reduction(size_average, reduce, reduction),
                                "binary_cross_entropy_with_logits")
    same_shape("binary_cross_entropy_with_logits", input, target)
    softplus_neg = add(log1p(exp(neg(abs(input)))), relu(neg(input)))  # log(1 + exp(-x))
    if pos_weight is not None:
        coef = add(mul(sub(pos_weight, 1.0), target), 1.0)
        loss = add(mul(sub(1.0, target), input), mul(coef, softplus_neg))
    else:
        loss = add(mul(sub(1.0, target), input), softplus_neg)
    if weight is not None:
        loss = mul(loss, weight)
    return reduce_loss(loss, reduction)
