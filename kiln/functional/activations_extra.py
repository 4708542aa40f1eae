"""More activation functions (relu6, hardswish, selu, glu, prelu, rrelu, softmin, ...), composed from kiln ops.

Each is built from existing primitives, so autograd and kiln.compile need nothing new and
compiled results equal eager ones. ``inplace=True`` is accepted for PyTorch compatibility;
the result is always a new tensor (assign it: ``x = F.relu6(x, inplace=True)``).
"""
from __future__ import annotations

from typing import Any

from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .activations import elu, softmax
from .creation import rand
from .math import (abs, add, cast, clamp, div, exp, ge, gt, le, log1p, logical_and, lt, minimum, mul, neg, sigmoid,
                   sub, tanh, where)
from .shape import chunk, reshape

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def relu6(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """min(max(x, 0), 6).

    >>> F.relu6(kiln.tensor([-1.0, 3.0, 9.0])).tolist()
    [0.0, 3.0, 6.0]
    """
    return clamp(input, 0.0, 6.0)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """relu6(x + 3) / 6: a piecewise-linear sigmoid.

    >>> F.hardsigmoid(kiln.tensor([-4.0, 0.0, 4.0])).tolist()
    [0.0, 0.5, 1.0]
    """
    return div(clamp(add(input, 3.0), 0.0, 6.0), 6.0)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """x * relu6(x + 3) / 6 (MobileNetV3's activation).

    >>> F.hardswish(kiln.tensor([-4.0, 0.0, 4.0])).tolist()
    [-0.0, 0.0, 4.0]
    """
    return div(mul(input, clamp(add(input, 3.0), 0.0, 6.0)), 6.0)


def selu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """scale * elu(x, alpha) with the self-normalizing constants (alpha ~ 1.6733, scale ~ 1.0507).

    >>> F.selu(kiln.tensor([1.0], dtype="float64")).tolist()
    [1.0507009873554805]
    """
    return mul(elu(input, SELU_ALPHA), SELU_SCALE)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    """x for x > 0, else alpha * (exp(x / alpha) - 1).

    >>> F.celu(kiln.tensor([2.0]), alpha=0.5).tolist()
    [2.0]
    """
    if alpha == 0:
        raise ValueError("celu: alpha cannot be 0 (it divides x); pass a non-zero alpha such as 1.0")
    negative = mul(sub(exp(div(minimum(input, 0.0), alpha)), 1.0), alpha)
    return where(gt(input, 0), input, negative)


def softsign(input: Tensor) -> Tensor:  # noqa: A002
    """x / (1 + |x|).

    >>> F.softsign(kiln.tensor([1.0, -3.0])).tolist()
    [0.5, -0.75]
    """
    return div(input, add(abs(input), 1.0))


def tanhshrink(input: Tensor) -> Tensor:  # noqa: A002
    """x - tanh(x).

    >>> F.tanhshrink(kiln.tensor([0.0])).tolist()
    [0.0]
    """
    return sub(input, tanh(input))


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:  # noqa: A002
    """x where x > threshold, else `value`.

    >>> F.threshold(kiln.tensor([0.5, 2.0]), 1.0, -1.0).tolist()
    [-1.0, 2.0]
    """
    return where(gt(input, threshold), input, value)


def glu(input: Tensor, dim: int = -1) -> Tensor:  # noqa: A002
    """Gated linear unit: split `input` in halves a, b along `dim`; a * sigmoid(b).

    >>> F.glu(kiln.randn(4, 6)).shape
    (4, 3)
    """
    if input.ndim == 0:
        raise ShapeError("glu: a 0-d tensor cannot be halved; pass a tensor with an even-sized dim")
    if not -input.ndim <= dim < input.ndim:
        raise IndexError(f"glu: dim {dim} is out of range for a {input.ndim}-D input (expected "
                         f"{-input.ndim} to {input.ndim - 1})")
    if input.shape[dim] % 2:
        raise ShapeError(f"glu: the halved dim must have an even size, but dim {dim} of input shape "
                         f"{tuple(input.shape)} is {input.shape[dim]}; pick an even-sized dim with dim=")
    a, b = chunk(input, 2, dim)
    return mul(a, sigmoid(b))


def prelu(input: Tensor, weight: Tensor) -> Tensor:  # noqa: A002
    """x where x > 0, else weight * x: one learned slope, or one per channel (dim 1).

    >>> F.prelu(kiln.tensor([-2.0, 3.0]), kiln.tensor([0.25])).tolist()
    [-0.5, 3.0]
    """
    if weight.ndim > 1:
        raise ShapeError(f"prelu: weight must be a scalar or 1-D (one slope per channel), got shape "
                         f"{tuple(weight.shape)}")
    count = weight.numel()
    if count == 1:
        slope = reshape(weight, ())
    else:
        channels = input.shape[1] if input.ndim >= 2 else 1
        if count != channels:
            raise ShapeError(f"prelu: weight has {count} slopes but the input has {channels} channels (dim 1 of "
                             f"shape {tuple(input.shape)}); use one slope or one per channel")
        slope = reshape(weight, (1, count) + (1,) * (input.ndim - 2))
    return where(gt(input, 0), input, mul(slope, input))


def logsigmoid(input: Tensor) -> Tensor:  # noqa: A002
    """log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)), without overflow for large |x|.

    >>> F.logsigmoid(kiln.tensor([0.0, -1000.0])).tolist()
    [-0.6931471824645996, -1000.0]
    """
    # minimum splits a tie's gradient in halves, so the gradient at 0 is sigmoid(0) = 1/2; above 0 it
    # is exactly sigmoid(-x) (no cancellation), so tiny gradients survive in float32
    return sub(minimum(input, 0.0), log1p(exp(neg(abs(input)))))


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:  # noqa: A002
    """softmax(-x) along `dim`: the smallest entries get the most weight.

    `dtype`, when given, is the dtype `input` is cast to first (and that of the result). As
    with kiln's Softmax, `dim` must be given: the implicit choice PyTorch deprecated is not made.

    >>> F.softmin(kiln.tensor([[1.0, 2.0]]), dim=1).sum().item()
    1.0
    """
    if dim is None:
        raise ValueError("softmin: pass dim explicitly, e.g. F.softmin(x, dim=-1); the implicit-dim choice "
                         "PyTorch deprecated is not supported")
    x = input if dtype is None else cast(input, dtype)
    return softmax(neg(x), dim)


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:  # noqa: A002
    """x where |x| > lambd, else 0 (NaN stays NaN).

    >>> F.hardshrink(kiln.tensor([-1.0, 0.25, 0.75])).tolist()
    [-1.0, 0.0, 0.75]
    """
    inside = logical_and(ge(input, -lambd), le(input, lambd))
    return where(inside, 0.0, input)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:  # noqa: A002
    """x - lambd where x > lambd, x + lambd where x < -lambd, else 0 (NaN stays NaN); lambd >= 0.

    >>> F.softshrink(kiln.tensor([-1.0, 0.25, 0.75])).tolist()
    [-0.5, 0.0, 0.25]
    """
    if not lambd >= 0:
        raise ValueError(f"softshrink: lambd must be >= 0, but found {lambd}")
    return where(gt(input, lambd), sub(input, lambd), where(lt(input, -lambd), add(input, lambd), mul(input, 0.0)))


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,  # noqa: A002
          inplace: bool = False) -> Tensor:
    """Randomized leaky ReLU: x for x > 0, else a * x.

    In training each element draws its own slope a uniformly from [lower, upper), from kiln's
    global random stream (as dropout draws its mask, so ``kiln.compile`` replays the same
    slopes eager would draw); otherwise a = (lower + upper) / 2 for every element.

    >>> F.rrelu(kiln.tensor([-2.0, 3.0]), 0.1, 0.3).tolist()
    [-0.4000000059604645, 3.0]
    """
    if not lower <= upper:
        raise ValueError(f"rrelu: the lower bound must be less than or equal to the upper bound, got "
                         f"lower={lower}, upper={upper}")
    if not training:
        slope: Any = (lower + upper) / 2.0
    else:
        u = rand(*input.shape, dtype=input.dtype, device=input.device)
        slope = add(mul(u, upper - lower), lower)
    return where(gt(input, 0), input, mul(input, slope))
