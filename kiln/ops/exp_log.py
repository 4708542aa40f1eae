"""More exponentials and logarithms: log2, log10, expm1.

Each kernel is NumPy's (or CuPy's) ufunc, with its own rounding (``log2(8.0)`` is exactly 3, which
``log(x) / log(2)`` is not). The renderers' table spells none of them, so compiled plans run these
kernels and keep eager's bits. The VJPs are written in kiln ops.
"""
from __future__ import annotations

import math

from .trig import F, _Ufunc


class Log2(_Ufunc):
    name, _ufunc = "log2", "log2"

    def vjp(self, g, inputs, node):
        return (F().div(g, F().mul(inputs[0], math.log(2.0))),)


class Log10(_Ufunc):
    name, _ufunc = "log10", "log10"

    def vjp(self, g, inputs, node):
        return (F().div(g, F().mul(inputs[0], math.log(10.0))),)


class Expm1(_Ufunc):
    """exp(x) - 1, accurate near 0."""

    name, _ufunc = "expm1", "expm1"
    saves_inputs = ()
    saves_output = True

    def vjp(self, g, inputs, node):
        return (F().mul(g, F().add(node.output(), 1.0)),)
