"""Connectionist temporal classification loss (ctc_loss), by the forward algorithm in log space.

The recursion runs over time in kiln ops, so autograd (eager or compiled) differentiates it.
Unreachable states hold a large finite negative log-probability rather than -inf, which keeps
every gradient finite; a sample with no valid alignment then gets loss inf (0 with ``zero_infinity``).
"""
from __future__ import annotations

from typing import Any

from ..ops.primitive import ShapeError
from ..trace_state import trace_state
from ..tensor import Tensor, tensor
from .checks import checked_index
from .creation import arange, full
from .math import (add, cast, clamp, cumsum, div, eq, exp, ge, gt, log, logical_and, lt, maximum, mean, mul,
                   ne, neg, sub, sum, where)
from .reduction import check_reduction
from .shape import cat, gather_unchecked, squeeze, stack, unsqueeze

_UNREACHABLE = -1e30  # log-probability of an unreachable state: exp() of it minus any real value is 0


def _lengths(name: str, value: Any, n: int, device: Any) -> Tensor:
    """Per-sample lengths as an int64 tensor of shape (n,)."""
    if isinstance(value, Tensor):
        t = value
    else:
        t = tensor([value] if isinstance(value, int) else list(value), dtype="int64", device=device)
    if t.dtype.is_floating_point:
        raise TypeError(f"ctc_loss: {name} must hold integers, got {t.dtype.name}; pass a list of ints or a "
                        f"long tensor")
    if tuple(t.reshape(-1).shape) != (n,):
        raise ShapeError(f"ctc_loss: {name} must hold one length per sample, shape ({n},), got {tuple(t.shape)}")
    return cast(t.reshape(n), "int64")


def _check_range(name: str, t: Tensor, top: int) -> None:
    """Eager only: every value of `t` lies in [0, top] (a compiled plan skips this value check)."""
    if trace_state.tracer is not None or not t._data.size:
        return
    lo, hi = int(t._data.min()), int(t._data.max())
    if lo < 0 or hi > top:
        raise ValueError(f"ctc_loss: every value of {name} must lie in [0, {top}], got values from {lo} to {hi}")


def _padded(targets: Tensor, target_lengths: Tensor, n: int) -> Tensor:
    """Targets as (n, S): padded ones as they are; concatenated 1-D ones spread out (S = total length)."""
    if targets.ndim == 2:
        return targets
    total = targets.shape[0]
    if total == 0:
        return targets.reshape(n, 0)
    starts = sub(cumsum(target_lengths, 0), target_lengths)
    idx = add(unsqueeze(starts, 1), unsqueeze(arange(total, device=targets.device), 0))
    return gather_unchecked(targets, 0, clamp(idx, 0, total - 1).reshape(-1)).reshape(n, total)


def _logsumexp(*terms: Tensor) -> Tensor:
    """log(sum(exp(terms))) for finite terms, shifted by their (detached) maximum."""
    top = terms[0]
    for t in terms[1:]:
        top = maximum(top, t)
    top = top.detach()
    total = exp(sub(terms[0], top))
    for t in terms[1:]:
        total = add(total, exp(sub(t, top)))
    return add(top, log(total))


def _shift(alpha: Tensor, k: int) -> Tensor:
    """alpha moved k states to the right along dim 1, unreachable states entering on the left."""
    n = alpha.shape[0]
    return cat([full((n, k), _UNREACHABLE, dtype=alpha.dtype, device=alpha.device), alpha[:, :-k]], 1)


def _alignment_nll(log_probs: Tensor, labels: Tensor, skip: Tensor, input_lengths: Tensor,
                   target_lengths: Tensor) -> Tensor:
    """-log p(target | input) per sample, summed over alignments by the forward recursion."""
    steps, n, _ = log_probs.shape
    states = labels.shape[1]
    emit = gather_unchecked(log_probs, 2, unsqueeze(labels, 0).expand(steps, n, states))  # (T, N, 2S+1)
    start = eq(unsqueeze(arange(states, device=labels.device), 0), 0).expand(n, states)
    alpha = where(start, 0.0, _UNREACHABLE).to(log_probs.dtype)  # before the first frame: in state 0
    for step in range(steps):
        stay, step_one = alpha, _shift(alpha, 1)
        terms = (stay, step_one, where(skip, _shift(alpha, 2), _UNREACHABLE)) if states > 2 else (stay, step_one)
        moved = add(emit[step], _logsumexp(*terms))
        alpha = where(unsqueeze(gt(input_lengths, step), 1), moved, alpha)  # frozen past each input's end
    last = unsqueeze(mul(target_lengths, 2), 1)
    end_blank = squeeze(gather_unchecked(alpha, 1, last), 1)
    end_label = squeeze(gather_unchecked(alpha, 1, clamp(sub(last, 1), 0)), 1)
    end_label = where(gt(target_lengths, 0), end_label, _UNREACHABLE)
    return neg(_logsumexp(end_blank, end_label))


def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths: Any, target_lengths: Any, blank: int = 0,
             reduction: str = "mean", zero_infinity: bool = False) -> Tensor:
    """CTC loss of label sequences `targets` under per-frame log-probabilities `log_probs` (T, N, C).

    `targets` is (N, S) padded or 1-D concatenated; lengths are tensors or lists of ints.
    'mean' divides each loss by its target length, then averages over the batch.

    >>> lp = kiln.nn.functional.log_softmax(kiln.randn(12, 2, 5), 2)
    >>> kiln.nn.functional.ctc_loss(lp, kiln.tensor([[1, 2, 2], [3, 4, 0]]), [12, 10], [3, 2])
    """
    check_reduction(reduction, "ctc_loss")
    unbatched = log_probs.ndim == 2
    if unbatched:
        log_probs, targets = unsqueeze(log_probs, 1), unsqueeze(targets, 0)
    if log_probs.ndim != 3 or targets.ndim not in (1, 2):
        raise ShapeError(f"ctc_loss: expects log_probs of shape (T, N, C) or (T, C) and targets of shape (N, S) or "
                         f"(sum(target_lengths),), got {tuple(log_probs.shape)} and {tuple(targets.shape)}")
    if targets.dtype.is_floating_point:
        raise TypeError(f"ctc_loss: targets must hold class indices (int), got {targets.dtype.name}")
    steps, n, n_classes = log_probs.shape
    if not 0 <= blank < n_classes:
        raise ValueError(f"ctc_loss: blank must be a class in [0, {n_classes}), got {blank}")
    input_lengths = _lengths("input_lengths", input_lengths, n, log_probs.device)
    target_lengths = _lengths("target_lengths", target_lengths, n, log_probs.device)
    if targets.ndim == 2 and targets.shape[0] != n:
        raise ShapeError(f"ctc_loss: padded targets need {n} rows, one per sample, got shape {tuple(targets.shape)}")
    _check_range("input_lengths", input_lengths, steps)
    _check_range("target_lengths", target_lengths, targets.shape[1] if targets.ndim == 2 else targets.shape[0])
    padded = _padded(cast(targets, "int64"), target_lengths, n)
    width = padded.shape[1]
    inside = lt(unsqueeze(arange(width, device=padded.device), 0), unsqueeze(target_lengths, 1))
    padded = checked_index("ctc_loss", where(inside, padded, blank), log_probs, 2)
    blanks = full((n, width), blank, dtype="int64", device=padded.device)
    labels = cat([stack([blanks, padded], 2).reshape(n, 2 * width), blanks[:, :1]], 1)  # (N, 2S+1)
    before = cat([blanks[:, :2], labels[:, :-2]], 1) if width else labels
    skip = logical_and(ne(labels, blank), ne(labels, before))
    nll = _alignment_nll(log_probs, labels, skip, input_lengths, target_lengths)
    # an alignment needs a frame per label, plus one blank between each pair of repeated labels
    repeats = sum(cast(logical_and(eq(padded[:, 1:], padded[:, :-1]), inside[:, 1:]), "int64"), 1) if width > 1 \
        else mul(target_lengths, 0)
    possible = ge(input_lengths, add(target_lengths, repeats))
    nll = where(possible, nll, 0.0 if zero_infinity else float("inf"))
    if reduction == "mean":
        return mean(div(nll, clamp(target_lengths, 1).to(nll.dtype)))
    if reduction == "sum":
        return sum(nll)
    return squeeze(nll, 0) if unbatched else nll
