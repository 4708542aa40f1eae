"""Trigonometric and hyperbolic primitives: tan, asin, acos, atan, atan2, sinh, cosh, asinh, acosh, atanh.

Each kernel is NumPy's (or CuPy's) ufunc. The renderers' table spells none of them, so the
compiled backends run these kernels as they run sin and cos: compiled results are eager's
bits. The VJPs are written in kiln ops, so higher-order gradients work.
"""
from __future__ import annotations

from typing import Any

from .elementwise import Binary, Unary, _unbroadcast


def F():  # noqa: N802 - lazy access to the functional ops used by VJPs
    from .. import functional

    return functional


def T():  # noqa: N802 - the trigonometric functional ops (cosh for sinh's VJP, ...)
    from ..functional import trig

    return trig


class _Ufunc(Unary):
    """A one-input float op computed by the array module's ufunc `_ufunc`."""

    _ufunc = ""
    saves_inputs = (0,)

    def kernel(self, xp: Any, x: Any) -> Any:
        return getattr(xp, self._ufunc)(x)


class Tan(_Ufunc):
    name, _ufunc = "tan", "tan"
    saves_inputs = ()
    saves_output = True

    def vjp(self, g, inputs, node):
        y = node.output()
        return (F().mul(g, F().add(F().mul(y, y), 1.0)),)


def _one_minus_square(x: Any) -> Any:
    return F().rsub(F().mul(x, x), 1.0)


class Asin(_Ufunc):
    name, _ufunc = "asin", "arcsin"

    def vjp(self, g, inputs, node):
        return (F().mul(g, F().rsqrt(_one_minus_square(inputs[0]))),)


class Acos(_Ufunc):
    name, _ufunc = "acos", "arccos"

    def vjp(self, g, inputs, node):
        return (F().neg(F().mul(g, F().rsqrt(_one_minus_square(inputs[0])))),)


class Atan(_Ufunc):
    name, _ufunc = "atan", "arctan"

    def vjp(self, g, inputs, node):
        x = inputs[0]
        return (F().div(g, F().add(F().mul(x, x), 1.0)),)


class Sinh(_Ufunc):
    name, _ufunc = "sinh", "sinh"

    def vjp(self, g, inputs, node):
        return (F().mul(g, T().cosh(inputs[0])),)


class Cosh(_Ufunc):
    name, _ufunc = "cosh", "cosh"

    def vjp(self, g, inputs, node):
        return (F().mul(g, T().sinh(inputs[0])),)


class Asinh(_Ufunc):
    name, _ufunc = "asinh", "arcsinh"

    def vjp(self, g, inputs, node):
        x = inputs[0]
        return (F().mul(g, F().rsqrt(F().add(F().mul(x, x), 1.0))),)


class Acosh(_Ufunc):
    name, _ufunc = "acosh", "arccosh"

    def vjp(self, g, inputs, node):
        x = inputs[0]
        return (F().mul(g, F().rsqrt(F().sub(F().mul(x, x), 1.0))),)


class Atanh(_Ufunc):
    name, _ufunc = "atanh", "arctanh"

    def vjp(self, g, inputs, node):
        return (F().div(g, _one_minus_square(inputs[0])),)


class Atan2(Binary):
    """atan2(a, b): the angle of the point (b, a), in (-pi, pi]."""

    name = "atan2"
    saves_inputs = (0, 1)

    def kernel(self, xp, a, b):
        return xp.arctan2(a, b)

    def vjp(self, g, inputs, node):
        a, b = inputs
        f = F()
        scale = f.div(g, f.add(f.mul(a, a), f.mul(b, b)))
        return (_unbroadcast(f.mul(scale, b), a) if a.requires_grad else None,
                _unbroadcast(f.neg(f.mul(scale, a)), b) if b.requires_grad else None)
