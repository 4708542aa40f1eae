"""How a loss reduces: ``reduction='none' | 'mean' | 'sum'``, and the legacy ``size_average``/``reduce`` flags."""
from __future__ import annotations

import warnings

from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .math import mean, sum

REDUCTIONS = ("mean", "sum", "none")


def check_reduction(reduction: str, op: str, allowed: tuple[str, ...] = REDUCTIONS) -> str:
    """`reduction` itself, after checking it is one of `allowed` (ValueError otherwise)."""
    if reduction not in allowed:
        raise ValueError(f"{op}: reduction must be one of {allowed}, got {reduction!r}; "
                         f"pass reduction='mean' (the default), 'sum' or 'none'")
    return reduction


def legacy_reduction(size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    """The reduction named by PyTorch's deprecated flags, or `reduction` when both are None.

    ``reduce=False`` means 'none'; otherwise ``size_average=False`` means 'sum' and anything
    else 'mean'. Using either flag warns, naming the ``reduction=`` to write instead.
    """
    if size_average is None and reduce is None:
        return reduction
    if reduce is False:
        chosen = "none"
    else:
        chosen = "sum" if size_average is False else "mean"
    warnings.warn(f"size_average and reduce are deprecated (as in PyTorch); pass reduction={chosen!r} instead",
                  UserWarning, stacklevel=3)
    return chosen


def reduce_loss(loss: Tensor, reduction: str, op: str = "loss") -> Tensor:
    """Mean, sum or keep the per-element losses."""
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return sum(loss)
    if reduction == "none":
        return loss
    return check_reduction(reduction, op)  # raises


def same_shape(op: str, input: Tensor, target: Tensor, what: str = "target") -> None:  # noqa: A002
    """Raise ShapeError unless `input` and `target` have the same shape."""
    if tuple(input.shape) != tuple(target.shape):
        raise ShapeError(f"{op}: input shape {tuple(input.shape)} and {what} shape {tuple(target.shape)} differ; "
                         f"they must match (kiln does not broadcast a loss target): reshape the {what}, "
                         f"e.g. {what}.view_as(input)")
