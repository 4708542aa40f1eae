"""More activation functions (relu6, hardswish, selu, glu, prelu, ...), composed from kiln ops.

Each is built from existing primitives, so autograd and kiln.compile need nothing new and
compiled results equal eager ones. ``inplace=True`` is accepted for PyTorch compatibility;
the result is always a new tensor (assign it: ``x = F.relu6(x, inplace=True)``).
"""
from __future__ import annotations

from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .activations import elu
from .math import abs, add, clamp, div, exp, gt, minimum, mul, sigmoid, sub, tanh, where
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
