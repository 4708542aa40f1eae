"""Closeness tests: ``kiln.isclose`` (elementwise, compiles) and ``kiln.allclose`` (a Python bool).

Two values are close when ``|a - b| <= atol + rtol * |b|`` with a finite difference, or
when they are equal (so equal infinities are close); NaN is close to NaN only with
`equal_nan`. These are PyTorch's rules.

>>> kiln.allclose(kiln.tensor([1.0, 2.0]), kiln.tensor([1.0, 2.0 + 1e-7]))
True
"""
from __future__ import annotations

from typing import Any

from ..dtypes import default_float, float64
from ..tensor import Tensor
from .math import (_as_tensor, _operands, abs, all, cast, eq, isfinite, isnan, le, logical_and, logical_or,
                   mul, add, sub, where)


def isclose(input: Any, other: Any, rtol: float = 1e-05, atol: float = 1e-08,  # noqa: A002
            equal_nan: bool = False) -> Tensor:
    """A bool tensor: where `input` and `other` are close (broadcasting).

    >>> kiln.isclose(kiln.tensor([1.0, float("inf")]), kiln.tensor([1.0 + 1e-9, float("inf")]))
    tensor([ True,  True])
    """
    if rtol < 0 or atol < 0:
        raise ValueError(f"isclose(): rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    a, b = _operands(_as_tensor(input), other)
    close = eq(a, b)
    if not a.is_floating_point():  # integers and bools: compare in floating point (no overflow in a - b)
        wide = float64 if a._data.dtype.itemsize >= 4 else default_float
        a, b = cast(a, wide), cast(b, wide)
    if equal_nan:
        close = logical_or(close, logical_and(isnan(a), isnan(b)))
    a, b = where(close, 0.0, a), where(close, 0.0, b)  # equal infinities: no inf - inf (NaN and a warning)
    error = abs(sub(a, b))
    allowed = add(mul(abs(b), float(rtol)), float(atol)) if rtol else float(atol)  # (no inf * 0 when rtol=0)
    return logical_or(close, logical_and(isfinite(error), le(error, allowed)))


def allclose(input: Any, other: Any, rtol: float = 1e-05, atol: float = 1e-08,  # noqa: A002
             equal_nan: bool = False) -> bool:
    """True when every element of `input` is close to `other` (see `isclose`).

    Returns a Python bool: inside ``kiln.compile`` that reads tensor data, so it is a
    graph break (or a guard on outside tensors), as any ``bool(tensor)``.
    """
    return bool(all(isclose(input, other, rtol, atol, equal_nan)))
