"""PyTorch's alternative names for ops kiln has under another name (NumPy's names, mostly):
divide, multiply, subtract, greater, less, negative, absolute, swapdims, moveaxis, ravel, numel, ...

>>> kiln.divide(kiln.tensor([3.0]), 2.0), kiln.greater(kiln.tensor([1, 2]), 1)
"""
from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from .math import _as_tensor, abs, div, ge, gt, le, lt, mul, ne, neg, sub
from .shape import movedim, reshape, swapaxes


def divide(input: Any, other: Any, *, rounding_mode: str | None = None) -> Tensor:  # noqa: A002
    """input / other; `rounding_mode` "trunc" or "floor" rounds the quotient (as torch.div)."""
    return div(input, other, rounding_mode=rounding_mode)


def true_divide(input: Any, other: Any) -> Tensor:  # noqa: A002
    """input / other in floating point."""
    return div(input, other)


def multiply(input: Any, other: Any) -> Tensor:  # noqa: A002
    return mul(input, other)


def subtract(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:  # noqa: A002
    """input - alpha * other."""
    return sub(input, other if alpha == 1 else mul(other, alpha))


def greater(input: Any, other: Any) -> Tensor:  # noqa: A002
    return gt(input, other)


def greater_equal(input: Any, other: Any) -> Tensor:  # noqa: A002
    return ge(input, other)


def less(input: Any, other: Any) -> Tensor:  # noqa: A002
    return lt(input, other)


def less_equal(input: Any, other: Any) -> Tensor:  # noqa: A002
    return le(input, other)


def not_equal(input: Any, other: Any) -> Tensor:  # noqa: A002
    return ne(input, other)


def negative(input: Any) -> Tensor:  # noqa: A002
    return neg(input)


def absolute(input: Any) -> Tensor:  # noqa: A002
    return abs(input)


def swapdims(input: Tensor, dim0: int, dim1: int) -> Tensor:  # noqa: A002
    return swapaxes(input, dim0, dim1)


def moveaxis(input: Tensor, source: int, destination: int) -> Tensor:  # noqa: A002
    return movedim(input, source, destination)


def ravel(input: Tensor) -> Tensor:  # noqa: A002
    """input flattened to one dim (a view where the layout allows)."""
    return reshape(input, (-1,))


def numel(input: Tensor) -> int:  # noqa: A002
    """The number of elements."""
    return _as_tensor(input).numel()
