"""Elementwise primitives: unary math, binary arithmetic, comparisons, where and cast.

Binary primitives take operands of one dtype (the frontend promotes and casts
first) and broadcast NumPy-style. Their C spellings live in the C renderer's table
(kiln/jit/backends/render/cstyle.py and c.py), checked against these kernels on special
values by tests/jit/test_c_expressions.py.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import bool_, get_dtype
from ..late_bound import functional as F  # noqa: N812 - the functional ops VJPs are written in
from .bit_select import bit_select
from .primitive import AbstractValue, Primitive, ShapeError


def broadcast_shapes(op: str, *shapes: tuple) -> tuple:
    """NumPy broadcasting of shapes; a ShapeError names the op and the shapes."""
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        size = 1
        for s in shapes:
            d = s[i - ndim + len(s)] if i >= ndim - len(s) else 1
            if d == 1:
                continue
            if size == 1:
                size = d
            elif d != size:
                shown = " and ".join(str(tuple(s)) for s in shapes)
                raise ShapeError(f"{op}: shapes {shown} are not broadcastable "
                                 f"(dimension {i - ndim} is {size} vs {d})")
        out.append(size)
    return tuple(out)


# ---- unary ------------------------------------------------------------------------
class Unary(Primitive):
    """Shape- and dtype-preserving one-input op."""

    def abstract(self, x: AbstractValue, **params: Any) -> AbstractValue:
        return x


class Neg(Unary):
    name = "neg"
    fuses = True

    def kernel(self, xp, x):
        return xp.negative(x)

    def vjp(self, g, inputs, node):
        return (F().neg(g),)


class Exp(Unary):
    name = "exp"
    fuses = transcendental = True
    saves_output = True

    def kernel(self, xp, x):
        return xp.exp(x)

    def vjp(self, g, inputs, node):
        return (F().mul(g, node.output()),)


class Log(Unary):
    name = "log"
    fuses = transcendental = True
    saves_inputs = (0,)

    def kernel(self, xp, x):
        return xp.log(x)

    def vjp(self, g, inputs, node):
        return (F().div(g, inputs[0]),)


class Log1p(Unary):
    name = "log1p"
    saves_inputs = (0,)

    def kernel(self, xp, x):
        return xp.log1p(x)

    def vjp(self, g, inputs, node):
        return (F().div(g, F().add(inputs[0], 1.0)),)


class Sin(Unary):
    name = "sin"
    saves_inputs = (0,)

    def kernel(self, xp, x):
        return xp.sin(x)

    def vjp(self, g, inputs, node):
        return (F().mul(g, F().cos(inputs[0])),)


class Cos(Unary):
    name = "cos"
    saves_inputs = (0,)

    def kernel(self, xp, x):
        return xp.cos(x)

    def vjp(self, g, inputs, node):
        return (F().neg(F().mul(g, F().sin(inputs[0]))),)


class Sqrt(Unary):
    name = "sqrt"
    fuses = True
    saves_output = True

    def kernel(self, xp, x):
        return xp.sqrt(x)

    def vjp(self, g, inputs, node):
        return (F().div(g, F().mul(node.output(), 2.0)),)


class Tanh(Unary):
    name = "tanh"
    fuses = transcendental = True
    saves_output = True

    def kernel(self, xp, x):
        return xp.tanh(x)

    def vjp(self, g, inputs, node):
        y = node.output()
        return (F().mul(g, F().rsub(F().mul(y, y), 1.0)),)


class Sigmoid(Unary):
    name = "sigmoid"
    fuses = transcendental = True
    saves_output = True

    def kernel(self, xp, x):
        # exp(-|x|) never overflows; the stable branch per sign: 1 / (1 + e) or e / (1 + e),
        # as one division of the picked numerator (the same quotients, in fewer passes)
        if x.ndim == 0:  # NumPy gives 0-d results as scalars, which `out=` cannot take
            return self.kernel(xp, x.reshape(1)).reshape(())
        e = xp.abs(x)
        xp.negative(e, out=e)
        xp.exp(e, out=e)
        # the numerator is 1 where x >= 0, else e; as max(e, x >= 0) (e <= 1, NaN stays NaN), a
        # branch-free pass where np.where would branch on each sign
        numerator = xp.maximum(e, x >= 0, dtype=e.dtype)
        return xp.divide(numerator, xp.add(e, 1, out=e), out=numerator).astype(x.dtype, copy=False)

    def vjp(self, g, inputs, node):
        y = node.output()
        return (F().mul(g, F().mul(y, F().rsub(y, 1.0))),)


class Relu(Unary):
    name = "relu"
    fuses = True
    saves_output = True

    def kernel(self, xp, x):
        return xp.maximum(x, 0).astype(x.dtype, copy=False)

    def vjp(self, g, inputs, node):
        f = F()
        return (f.where(f.gt(node.output(), 0), g, _zero(g)),)


def _erf_numpy(xp: Any, x: Any) -> Any:
    """erf to double precision: SciPy when installed, else a positive-term series (|x| < 6; beyond, erf is +-1)."""
    try:
        from scipy.special import erf  # noqa: PLC0415

        return erf(x).astype(x.dtype, copy=False)  # SciPy has no float16 loop
    except ImportError:
        pass
    x64 = xp.asarray(x, dtype=xp.float64)
    a = xp.abs(x64)
    small = xp.minimum(a, 6.0)  # erfc(6) = 2e-17: erf is 1 in double precision beyond
    x2 = small * small
    # erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n 2^n x^(2n+1) / (1*3*...*(2n+1)): no cancellation
    total = _erf_series(xp, small, x2)
    series = 2.0 / math.sqrt(math.pi) * xp.exp(-x2) * total
    result = xp.where(a < 6.0, series, 1.0)
    signed = xp.where(x64 == 0, x64, xp.sign(x64) * result)  # erf(-0.0) is -0.0; NaN stays NaN
    return signed.astype(x.dtype, copy=False)


_ERF_BANDS = (1.0, 2.0, 3.0, 4.0, 5.0)  # |x| bands summed apart: small values stop after fewer terms


def _erf_series(xp: Any, small: Any, x2: Any) -> Any:
    """The series' sums, band by band of |x|: each band adds terms until its largest is below
    1e-17 of its largest sum. A term of x is x^(2n+1) times a factor that grows with n more slowly
    than x^2, so a band's smaller values are as converged as its largest; summed in one array,
    every value took as many terms as the largest |x| needed (~20 for |x| < 1, ~150 near 6)."""
    total = small.copy()
    flat_small, flat_x2, flat_total = small.reshape(-1), x2.reshape(-1), total.reshape(-1)
    band = xp.searchsorted(xp.asarray(_ERF_BANDS), flat_small, side="right")
    for k in range(len(_ERF_BANDS) + 1):
        where = xp.flatnonzero(band == k)
        if where.size == 0:
            continue
        term = flat_small[where]
        part = term.copy()
        twice_x2 = 2.0 * flat_x2[where]  # exact: term * 2 * x2 rounds as term * (2 x2)
        for n in range(1, 300):
            term = term * twice_x2 / (2 * n + 1)
            part += term
            if float(xp.max(term, initial=0.0)) < 1e-17 * max(float(xp.max(part, initial=0.0)), 1e-300):
                break
        flat_total[where] = part
    return total


class Erf(Unary):
    name = "erf"
    fuses = transcendental = True
    saves_inputs = (0,)

    def kernel(self, xp, x):
        if xp is np and type(x) is np.ndarray and x.dtype == np.float32:  # kiln's vectorized erf (erf_native.py)
            from .erf_native import erf_float32  # noqa: PLC0415 - it imports kiln.jit, which imports kiln.ops

            out = erf_float32(x)
            if out is not None:
                return out
        return _erf_numpy(xp, x)

    def vjp(self, g, inputs, node):
        f = F()
        x = inputs[0]
        return (f.mul(g, f.mul(f.exp(f.neg(f.mul(x, x))), 2.0 / math.sqrt(math.pi))),)


class Abs(Unary):
    name = "abs"
    fuses = True
    saves_inputs = (0,)

    def kernel(self, xp, x):
        return xp.abs(x)

    def vjp(self, g, inputs, node):
        return (F().mul(g, F().sign(inputs[0])),)


class Sign(Unary):
    name = "sign"
    fuses = True

    def kernel(self, xp, x):
        return xp.sign(x)

    def vjp(self, g, inputs, node):
        return (F().zeros_like(g),)


class _Rounding(Unary):
    """floor/ceil/round: piecewise constant, so the gradient is 0 (as PyTorch)."""

    _ufunc = ""

    def kernel(self, xp, x):
        return getattr(xp, self._ufunc)(x)

    def vjp(self, g, inputs, node):
        return (F().zeros_like(g),)


class Floor(_Rounding):
    name, _ufunc = "floor", "floor"


class Ceil(_Rounding):
    name, _ufunc = "ceil", "ceil"


class Round(_Rounding):
    """Round half to even, as NumPy, PyTorch and C's nearbyint."""

    name, _ufunc = "round", "round"


class Trunc(_Rounding):
    """Round toward zero."""

    name, _ufunc = "trunc", "trunc"


class LogicalNot(Primitive):
    name = "logical_not"
    fuses = True

    def abstract(self, x, **params):
        return AbstractValue(x.shape, bool_)

    def kernel(self, xp, x):
        return xp.logical_not(x)


class Cast(Primitive):
    name = "cast"
    fuses = True

    def abstract(self, x, *, dtype):
        return AbstractValue(x.shape, get_dtype(dtype))

    def kernel(self, xp, x, *, dtype):
        return x.astype(get_dtype(dtype).np)

    def vjp(self, g, inputs, node, *, dtype):
        x = inputs[0]
        if not x.dtype.is_floating_point:
            return (None,)
        return (F().cast(g, x.dtype),)


# ---- binary -----------------------------------------------------------------------
class Binary(Primitive):
    """Two same-dtype operands, broadcast; the output has their dtype."""

    def abstract(self, a: AbstractValue, b: AbstractValue, **params: Any) -> AbstractValue:
        if a.dtype is not b.dtype:
            raise TypeError(f"{self.name}: operands must share a dtype, got {a.dtype.name} and "
                            f"{b.dtype.name}; the frontend casts them, so call kiln.{self.name}()")
        return AbstractValue(broadcast_shapes(self.name, a.shape, b.shape), a.dtype)


def _unbroadcast(g, x):
    return F().sum_to(g, x.shape)


def _zero(g):
    """A 0-d zero of `g`'s dtype and device: the other branch of a gradient's `where`, broadcast
    (the same values as a full zero tensor, without making one)."""
    return F().zeros((), dtype=g.dtype, device=g.device)


class Add(Binary):
    name = "add"
    fuses = True

    def kernel(self, xp, a, b):
        return xp.add(a, b)

    def vjp(self, g, inputs, node):
        a, b = inputs
        return (_unbroadcast(g, a) if a.requires_grad else None,
                _unbroadcast(g, b) if b.requires_grad else None)


class Sub(Binary):
    name = "sub"
    fuses = True

    def kernel(self, xp, a, b):
        return xp.subtract(a, b)

    def vjp(self, g, inputs, node):
        a, b = inputs
        return (_unbroadcast(g, a) if a.requires_grad else None,
                _unbroadcast(F().neg(g), b) if b.requires_grad else None)


class Mul(Binary):
    name = "mul"
    fuses = True
    saves_inputs = (0, 1)

    def saved_inputs(self, inputs):
        # each input's value is read only for the other's gradient: x * 0.5 keeps no copy of x
        a, b = inputs
        return (0, 1) if a.requires_grad and b.requires_grad else (1,) if a.requires_grad else (0,)

    def kernel(self, xp, a, b):
        return xp.multiply(a, b)

    def vjp(self, g, inputs, node):
        a, b = inputs
        f = F()
        return (_unbroadcast(f.mul(g, b), a) if a.requires_grad else None,
                _unbroadcast(f.mul(g, a), b) if b.requires_grad else None)


class Div(Binary):
    name = "div"
    fuses = True
    saves_inputs = (0, 1)

    def saved_inputs(self, inputs):
        return (0, 1) if inputs[1].requires_grad else (1,)  # a's value is read only for b's gradient

    def kernel(self, xp, a, b):
        return xp.true_divide(a, b)

    def vjp(self, g, inputs, node):
        a, b = inputs
        f = F()
        ga = _unbroadcast(f.div(g, b), a) if a.requires_grad else None
        gb = _unbroadcast(f.neg(f.div(f.mul(g, a), f.mul(b, b))), b) if b.requires_grad else None
        return ga, gb


class Pow(Binary):
    name = "pow"
    saves_inputs = (0, 1)

    def kernel(self, xp, a, b):
        return xp.power(a, b)

    def vjp(self, g, inputs, node):
        a, b = inputs
        f = F()
        ga = gb = None
        if a.requires_grad:
            ga = _unbroadcast(f.mul(g, f.mul(b, f.pow(a, f.sub(b, 1.0)))), a)
        if b.requires_grad:
            # d/db a^b = a^b log a; defined as 0 where a == 0 (as PyTorch does)
            safe = f.where(f.eq(a, 0), f.ones_like(a), a)
            term = f.mul(f.pow(a, b), f.log(safe))
            gb = _unbroadcast(f.mul(g, term), b)
        return ga, gb


class _Extremum(Binary):
    """maximum/minimum: the gradient goes to the winner; ties split it evenly (as PyTorch)."""

    fuses = True
    saves_inputs = (0, 1)
    _wins = "gt"

    def vjp(self, g, inputs, node):
        a, b = inputs
        f = F()
        wins = getattr(f, self._wins)
        half = f.mul(g, 0.5)
        zero = f.zeros_like(g)
        tie = f.eq(a, b)
        ga = gb = None
        if a.requires_grad:
            ga = _unbroadcast(f.where(wins(a, b), g, f.where(tie, half, zero)), a)
        if b.requires_grad:
            gb = _unbroadcast(f.where(wins(b, a), g, f.where(tie, half, zero)), b)
        return ga, gb


class Maximum(_Extremum):
    name = "maximum"
    _wins = "gt"

    def kernel(self, xp, a, b):
        return xp.maximum(a, b)


class Minimum(_Extremum):
    name = "minimum"
    _wins = "lt"

    def kernel(self, xp, a, b):
        return xp.minimum(a, b)


class FloorDivide(Binary):
    """floor(a / b), Python's //; not differentiable (as PyTorch)."""

    name = "floor_divide"

    def kernel(self, xp, a, b):
        return xp.floor_divide(a, b)

    def vjp(self, g, inputs, node):
        return (None, None)


class Compare(Binary):
    """Comparisons and logical ops: bool output, no gradient."""

    fuses = True
    _ufunc = ""

    def abstract(self, a, b, **params):
        return AbstractValue(super().abstract(a, b).shape, bool_)

    def kernel(self, xp, a, b):
        return getattr(xp, self._ufunc)(a, b)


class Lt(Compare):
    name, _ufunc = "lt", "less"


class Le(Compare):
    name, _ufunc = "le", "less_equal"


class Gt(Compare):
    name, _ufunc = "gt", "greater"


class Ge(Compare):
    name, _ufunc = "ge", "greater_equal"


class Eq(Compare):
    name, _ufunc = "eq", "equal"


class Ne(Compare):
    name, _ufunc = "ne", "not_equal"


class LogicalAnd(Compare):
    name, _ufunc = "logical_and", "logical_and"


class LogicalOr(Compare):
    name, _ufunc = "logical_or", "logical_or"


class Where(Primitive):
    """where(cond, a, b): a where cond is true, else b; all three broadcast."""

    name = "where"
    fuses = True
    saves_inputs = (0,)

    def abstract(self, c, a, b):
        if c.dtype is not bool_:
            raise TypeError(f"where: condition must be bool, got {c.dtype.name}")
        if a.dtype is not b.dtype:
            raise TypeError(f"where: branches must share a dtype, got {a.dtype.name} and {b.dtype.name}")
        return AbstractValue(broadcast_shapes("where", c.shape, a.shape, b.shape), a.dtype)

    def kernel(self, xp, c, a, b):
        selected = bit_select(c, a, b) if xp is np else None
        return selected if selected is not None else xp.where(c, a, b)

    def vjp(self, g, inputs, node):
        c, a, b = inputs
        f = F()
        zero = _zero(g)
        return (None,
                _unbroadcast(f.where(c, g, zero), a) if a.requires_grad else None,
                _unbroadcast(f.where(c, zero, g), b) if b.requires_grad else None)
