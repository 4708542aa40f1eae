"""Trigonometric and hyperbolic functions: tan, asin, acos, atan, atan2, sinh, cosh, asinh, acosh, atanh.

Integer and bool inputs give the default float dtype, as in PyTorch. Each is one primitive
(kiln/ops/trig.py), differentiable, and compiles to the same bits as eager. NumPy's names
(arcsin, arctan2, ...) are aliases.

>>> kiln.atan2(kiln.tensor([1.0, -1.0]), kiln.tensor([0.0, 0.0]))   # [pi/2, -pi/2]
"""
from __future__ import annotations

from typing import Any

from ..dtypes import default_float
from ..ops.primitive import REGISTRY, bind
from ..tensor import Tensor
from .math import _operands, _unary, cast


def tan(x: Any) -> Tensor:
    """The tangent of x, elementwise.

    >>> kiln.tan(kiln.tensor([0.0, 0.5]))
    """
    return _unary("tan", x)


def asin(x: Any) -> Tensor:
    """The arcsine of x (NaN outside [-1, 1]).

    >>> kiln.asin(kiln.tensor([0.0, 1.0]))
    """
    return _unary("asin", x)


def acos(x: Any) -> Tensor:
    """The arccosine of x (NaN outside [-1, 1]).

    >>> kiln.acos(kiln.tensor([0.0, 1.0]))
    """
    return _unary("acos", x)


def atan(x: Any) -> Tensor:
    """The arctangent of x, in (-pi/2, pi/2).

    >>> kiln.atan(kiln.tensor([0.0, 1.0]))
    """
    return _unary("atan", x)


def sinh(x: Any) -> Tensor:
    """The hyperbolic sine of x.

    >>> kiln.sinh(kiln.tensor([0.0, 1.0]))
    """
    return _unary("sinh", x)


def cosh(x: Any) -> Tensor:
    """The hyperbolic cosine of x.

    >>> kiln.cosh(kiln.tensor([0.0, 1.0]))
    """
    return _unary("cosh", x)


def asinh(x: Any) -> Tensor:
    """The inverse hyperbolic sine of x.

    >>> kiln.asinh(kiln.tensor([0.0, 1.0]))
    """
    return _unary("asinh", x)


def acosh(x: Any) -> Tensor:
    """The inverse hyperbolic cosine of x (NaN below 1).

    >>> kiln.acosh(kiln.tensor([1.0, 2.0]))
    """
    return _unary("acosh", x)


def atanh(x: Any) -> Tensor:
    """The inverse hyperbolic tangent of x (+-inf at +-1, NaN beyond).

    >>> kiln.atanh(kiln.tensor([0.0, 0.5]))
    """
    return _unary("atanh", x)


def atan2(input: Any, other: Any) -> Tensor:  # noqa: A002 - PyTorch's argument name
    """The angle of the point (other, input) in (-pi, pi]: atan(input / other) with the quadrant.

    Operands broadcast and promote; integers give the default float dtype.

    >>> kiln.atan2(kiln.tensor([1.0]), kiln.tensor([-1.0]))   # 3*pi/4
    """
    a, b = _operands(input, other)
    if a._data.dtype.kind not in "fV":  # ("V": bfloat16)
        a, b = cast(a, default_float), cast(b, default_float)
    return bind(REGISTRY["atan2"], (a, b), {})


arcsin, arccos, arctan, arctan2 = asin, acos, atan, atan2
arcsinh, arccosh, arctanh = asinh, acosh, atanh

__all__ = ["tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh",
           "arcsin", "arccos", "arctan", "arctan2", "arcsinh", "arccosh", "arctanh"]
