"""Activation functions and softmax, written in kiln ops so the compiler can fuse them."""
from __future__ import annotations

import math as _math

from ..tensor import Tensor
from .math import (abs, add, amax, erf, exp, gt, log, log1p, mul, relu, sigmoid, sub, sum, tanh,
                   where)


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return where(gt(x, 0), x, mul(x, negative_slope))


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU: exact (erf) by default, or approximate='tanh' (GPT-2's form)."""
    if approximate == "tanh":
        inner = mul(add(x, mul(mul(mul(x, x), x), 0.044715)), _math.sqrt(2.0 / _math.pi))
        return mul(mul(x, 0.5), add(tanh(inner), 1.0))
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return mul(mul(x, 0.5), add(erf(mul(x, 1.0 / _math.sqrt(2.0))), 1.0))


def silu(x: Tensor) -> Tensor:
    return mul(x, sigmoid(x))


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, computed without overflow; linear above threshold."""
    bx = mul(x, beta) if beta != 1 else x
    stable = add(relu(bx), log1p(exp(mul(abs(bx), -1.0))))
    if beta != 1:
        stable = mul(stable, 1.0 / beta)
    return where(gt(bx, threshold), x, stable)


def softmax(x: Tensor, dim: int = -1, *, axis: int | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along dim, shifted by the max for stability.

    A tensor with no elements gives an empty result of its shape (as PyTorch).
    """
    d = axis if axis is not None else dim
    e = exp(_shift_by_max(x, d))
    return mul(e, _recip(sum(e, d, True)))


def _shift_by_max(x: Tensor, d: int) -> Tensor:
    """x minus its (detached) max along d; x itself when it has no elements (nothing to shift, no max)."""
    if 0 in tuple(x.shape):
        return x
    return sub(x, amax(x, d, True).detach())


def _recip(s: Tensor) -> Tensor:
    from .math import reciprocal  # noqa: PLC0415

    return reciprocal(s)


def log_softmax(x: Tensor, dim: int = -1, *, axis: int | None = None) -> Tensor:
    """x - logsumexp(x) along dim; a tensor with no elements gives an empty result of its shape."""
    d = axis if axis is not None else dim
    shifted = _shift_by_max(x, d)
    return sub(shifted, log(sum(exp(shifted), d, True)))


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    from .math import clamp  # noqa: PLC0415

    return clamp(x, min_val, max_val)


def mish(x: Tensor) -> Tensor:
    return mul(x, tanh(softplus(x)))


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    from .math import minimum  # noqa: PLC0415

    return where(gt(x, 0), x, mul(sub(exp(minimum(x, 0.0)), 1.0), alpha))
