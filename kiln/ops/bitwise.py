"""Bitwise primitives on integer and bool arrays: bitwise_and, bitwise_or, bitwise_xor, bitwise_not.

Not differentiable (integer and bool results never carry gradients). The compiled backends
run their kernels (NumPy's or CuPy's ufuncs), so compiled results are eager's bits.
"""
from __future__ import annotations

from typing import Any

from .elementwise import Binary, Unary
from .primitive import AbstractValue


def integral_only(op: str, *avals: AbstractValue) -> None:
    """Raise TypeError unless every operand is an integer or bool array."""
    bad = [a.dtype.name for a in avals if a.dtype.kind not in "biu"]
    if bad:
        raise TypeError(f"{op}: operands must be integer or bool tensors, got {', '.join(bad)}; "
                        f"cast first (x.long() or x.bool()), or use kiln.logical_* for truth values")


class _BitwiseBinary(Binary):
    _ufunc = ""

    def abstract(self, a, b, **params):
        integral_only(self.name, a, b)
        return super().abstract(a, b)

    def kernel(self, xp: Any, a: Any, b: Any) -> Any:
        return getattr(xp, self._ufunc)(a, b)

    def vjp(self, g, inputs, node):
        return (None, None)


class BitwiseAnd(_BitwiseBinary):
    name, _ufunc = "bitwise_and", "bitwise_and"


class BitwiseOr(_BitwiseBinary):
    name, _ufunc = "bitwise_or", "bitwise_or"


class BitwiseXor(_BitwiseBinary):
    name, _ufunc = "bitwise_xor", "bitwise_xor"


class BitwiseNot(Unary):
    name = "bitwise_not"

    def abstract(self, x, **params):
        integral_only(self.name, x)
        return x

    def kernel(self, xp, x):
        return xp.invert(x)

    def vjp(self, g, inputs, node):
        return (None,)
