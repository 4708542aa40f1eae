"""Classification losses with PyTorch's semantics: nll_loss and cross_entropy (weights, ignore_index,
smoothing). The other losses live in the losses_* modules."""
from __future__ import annotations

from typing import Any

from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .activations import log_softmax
from .checks import checked_targets
from .loss_compiled import compiled_cross_entropy
from .loss_fast import fast_cross_entropy
from .math import _count, add, cast, div, mul, ne, neg, sum, where
from .reduction import check_reduction, legacy_reduction, reduce_loss
from .shape import gather_unchecked, squeeze, unsqueeze


def _per_class(value: float, n_classes: Any) -> Any:
    """value / n_classes, symbolic when the class count is a dynamic dim (float / SymInt would bake it)."""
    return n_classes.__rtruediv__(value) if getattr(n_classes, "expr", None) is not None else value / n_classes


def _class_shape(w: Tensor, ndim: int) -> Tensor:
    """Reshape per-class weights (C,) to broadcast along dim 1 of an ndim-d input."""
    return w.reshape((1, -1) + (1,) * (ndim - 2))


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
             size_average: bool | None = None, ignore_index: int = -100, reduce: bool | None = None,
             reduction: str = "mean", *, label_smoothing: float = 0.0) -> Tensor:
    """Negative log-likelihood of class indices `target` under log-probabilities `input` (N, C, ...).

    Targets outside [0, C) other than `ignore_index` raise IndexError, as in PyTorch.

    >>> kiln.nn.functional.nll_loss(kiln.nn.functional.log_softmax(kiln.randn(4, 3), 1), kiln.tensor([0, 2, 1, 0]))
    """
    reduction = check_reduction(legacy_reduction(size_average, reduce, reduction), "nll_loss")
    return _nll_loss(input, target, weight, ignore_index, reduction, label_smoothing, "nll_loss")


def _nll_loss(logp: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int, reduction: str,
              label_smoothing: float, op: str) -> Tensor:
    """`nll_loss`; `op` names the public function in the target range error."""
    if logp.ndim == 1:
        logp, target = unsqueeze(logp, 0), unsqueeze(target, 0)
        out = _nll_loss(logp, target, weight, ignore_index, reduction, label_smoothing, op)
        return squeeze(out, 0) if reduction == "none" else out
    if target.dtype.is_floating_point:
        raise TypeError("nll_loss: target must hold class indices (int64); for class probabilities "
                        "use cross_entropy with a float target")
    expected = (logp.shape[0],) + tuple(logp.shape[2:])
    if tuple(target.shape) != expected:
        raise ShapeError(f"nll_loss: input of shape {tuple(logp.shape)} needs a target of shape "
                         f"{expected}, got {tuple(target.shape)}")
    n_classes = logp.shape[1]
    target = checked_targets(op, target, n_classes, ignore_index)
    valid = ne(target, ignore_index)
    safe_target = where(valid, target, 0)
    picked = squeeze(gather_unchecked(logp, 1, unsqueeze(safe_target, 1)), 1)  # targets checked above
    validf = cast(valid, logp.dtype)
    if weight is not None:
        w_t = mul(gather_unchecked(_class_shape(weight, 2).expand(safe_target.numel(), n_classes), 1,
                                   safe_target.reshape(-1, 1)).reshape(tuple(target.shape)), validf)
    else:
        w_t = validf
    # where(), not a 0 weight, drops ignored entries: their gradient stays 0 even when every
    # entry is ignored and the mean divides by a zero total weight (PyTorch gives 0 there too)
    loss = where(valid, mul(neg(picked), w_t), 0.0)
    smooth = None
    if label_smoothing > 0:
        per_class = neg(logp) if weight is None else mul(neg(logp), _class_shape(weight, logp.ndim))
        smooth = where(valid, sum(per_class, 1), 0.0)
    if reduction == "none":
        if smooth is not None:
            loss = add(mul(loss, 1 - label_smoothing), mul(smooth, _per_class(label_smoothing, n_classes)))
        return loss
    total = sum(loss)
    if smooth is not None:
        total = add(mul(total, 1 - label_smoothing), mul(sum(smooth), _per_class(label_smoothing, n_classes)))
    if reduction == "sum":
        return total
    if reduction == "mean":
        return div(total, sum(w_t))
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                  size_average: bool | None = None, ignore_index: int = -100, reduce: bool | None = None,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Softmax cross-entropy of logits (N, C, ...) against class indices or class probabilities.

    >>> kiln.nn.functional.cross_entropy(kiln.randn(4, 3), kiln.tensor([0, 2, 1, 0]))
    """
    reduction = check_reduction(legacy_reduction(size_average, reduce, reduction), "cross_entropy")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    compiled = compiled_cross_entropy(_cross_entropy, input, target, weight, ignore_index, reduction, label_smoothing)
    if compiled is not None:
        return compiled
    fast = fast_cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing)
    if fast is not None:
        return fast
    return _cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing)


def _cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int,  # noqa: A002
                   reduction: str, label_smoothing: float) -> Tensor:
    """`cross_entropy` in primitives (what a tracer records, and every case the fast path leaves)."""
    logp = log_softmax(input, 1 if input.ndim > 1 else 0)
    if target.dtype.is_floating_point:
        if tuple(target.shape) != tuple(input.shape):
            raise ShapeError(f"cross_entropy: probability target shape {tuple(target.shape)} must "
                             f"match the input shape {tuple(input.shape)}")
        n_classes = input.shape[1] if input.ndim > 1 else input.shape[0]
        if label_smoothing > 0:
            target = add(mul(target, 1 - label_smoothing), _per_class(label_smoothing, n_classes))
        terms = mul(logp, target)
        if weight is not None:
            terms = mul(terms, _class_shape(weight, input.ndim) if input.ndim > 1 else weight)
        loss = neg(sum(terms, 1 if input.ndim > 1 else 0))
        if reduction == "mean":
            return div(sum(loss), _count(loss.numel() if loss.ndim else 1))
        return reduce_loss(loss, reduction)
    return _nll_loss(logp, target, weight, ignore_index, reduction, label_smoothing, "cross_entropy")


