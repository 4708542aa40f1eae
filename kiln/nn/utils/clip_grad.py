"""Gradient clipping, in place on ``p.grad``, as in ``torch.nn.utils``."""
from __future__ import annotations

import math
from typing import Iterable

from ... import autograd
from ...functional.creation import full
from ...functional.math import abs as _abs, amax, clamp, mul, pow as _pow, sum as _sum
from ...tensor import Tensor


def _powered(g: Tensor, norm_type: float) -> Tensor:
    """|g| ** norm_type; the usual 2-norm as g * g, exact and fusable (pow stays with NumPy)."""
    return mul(g, g) if norm_type == 2 else _pow(_abs(g), norm_type)


def _grads(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p.grad for p in params if p.grad is not None]


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:
    """Scale all grads so that their joint `norm_type` norm is at most `max_norm`; return the old norm.

    >>> total = kiln.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    """
    grads = _grads(parameters)
    if not grads:
        return full((), 0.0)
    with autograd.no_grad():
        if math.isinf(norm_type):
            norms = [amax(_abs(g)) for g in grads]
            total = norms[0]
            for n in norms[1:]:
                total = total.maximum(n)
        else:
            total = sum((_sum(_powered(g, norm_type)) for g in grads[1:]), _sum(_powered(grads[0], norm_type)))
            total = _pow(total, 1.0 / norm_type)
        if error_if_nonfinite and not math.isfinite(float(total)):
            raise RuntimeError(f"the total norm of order {norm_type} of the gradients is non-finite, so it "
                               "cannot be clipped; pass error_if_nonfinite=False to skip this check")
        coef = clamp(max_norm / (total + 1e-6), None, 1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))
    return total


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clamp every grad element into [-clip_value, clip_value], in place."""
    with autograd.no_grad():
        for g in _grads(parameters):
            g.clamp_(-clip_value, clip_value)
