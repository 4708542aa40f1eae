"""Elementwise math, reductions and matmul: the public wrappers over the primitives.

Wrappers accept tensors and Python scalars, apply type promotion (see kiln.dtypes),
and normalize axes; the primitives below them see one dtype and canonical params.
"""
from __future__ import annotations

import builtins
import math as _math
from typing import Any, Sequence

import numpy as np

from ..dtypes import DType, bool_, default_float, get_dtype, promote, promote_with_scalar
from ..ops.checks import IntegerDivisionByZeroError  # noqa: F401 (kiln.IntegerDivisionByZeroError)
from ..ops.primitive import REGISTRY, ShapeError, bind, bind_binary
from ..trace_state import trace_state
from ..tensor import Tensor, literal
from .checks import checked_divisor
from .reshaping import reshape, squeeze_dims

_P = REGISTRY


def _const(value: Any, dtype: DType, like: Tensor) -> Tensor:
    """A 0-d constant tensor for a Python scalar operand.

    A symbolic size (a SymInt from dynamic_dims tracing) becomes a `full` op whose
    value the compiled plan re-evaluates per call, instead of a baked literal.
    """
    if getattr(value, "expr", None) is not None and trace_state.tracer is not None:
        return bind(_P["full"], (), {"shape": (), "value": value, "dtype": dtype.name, "device": like._device})
    kind = value.__class__
    if kind is float or kind is int or kind is bool:
        # literals are immutable and never escape, so equal scalars share one (keyed by repr
        # for floats, which keeps 0.0 and -0.0 apart)
        key = (repr(value) if kind is float else value, kind, dtype.name, like._device)
        found = _LITERALS.get(key)
        if found is None:
            if len(_LITERALS) > 4096:
                _LITERALS.clear()
            found = _LITERALS[key] = literal(value, dtype, like._device)
        return found
    return literal(value, dtype, like._device)


_LITERALS: dict = {}


def _as_tensor(x: Any) -> Tensor:
    if isinstance(x, Tensor):
        return x
    from ..tensor import tensor  # noqa: PLC0415

    return tensor(x)


def cast(x: Tensor, dtype: Any) -> Tensor:
    """x converted to `dtype` (differentiable for float targets)."""
    dt = get_dtype(dtype)
    if x._data.dtype == dt.np:
        return x
    return bind(_P["cast"], (x,), {"dtype": dt.name})


def _reject_tensor_sequence(x: Any) -> None:
    """A list or tuple holding tensors is not an operand (PyTorch raises TypeError too): NumPy would
    stack it into an array with one more dim, and broadcasting would silently give another shape.
    The usual case is ``x - x.max(dim)``, whose result is the pair (values, indices)."""
    if isinstance(x, (list, tuple)) and builtins.any(isinstance(item, Tensor) for item in x):
        hint = " (max/min with a dim return (values, indices): use .values)" if hasattr(x, "indices") else ""
        raise TypeError(f"unsupported operand: a Tensor and a {type(x).__name__} of tensors{hint}. Fix: pass a "
                        "tensor, e.g. kiln.stack(...) of the sequence, or pick the element you mean")


def _operands(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """Promote two operands (tensors or scalars) to tensors of one dtype."""
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        _reject_tensor_sequence(a)
        _reject_tensor_sequence(b)
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            if a._data.dtype != b._data.dtype:
                dt = promote(a.dtype, b.dtype)
                a, b = cast(a, dt), cast(b, dt)
            return a, b
        if getattr(b, "is_sparse", False):  # dense with sparse: a dense result (as PyTorch gives for +)
            return _operands(a, b.to_dense())
        dt = promote_with_scalar(a.dtype, b)
        return cast(a, dt), _const(b, dt, a)
    if isinstance(b, Tensor):
        dt = promote_with_scalar(b.dtype, a)
        return _const(a, dt, b), cast(b, dt)
    a = _as_tensor(a)
    return _operands(a, b)


def _binary(name: str, a: Any, b: Any) -> Tensor:
    if not (isinstance(a, Tensor) and isinstance(b, Tensor) and a._data.dtype is b._data.dtype):
        a, b = _operands(a, b)
    return bind_binary(_P[name], a, b)


def _floating(x: Any) -> Tensor:
    x = _as_tensor(x)
    if x._data.dtype.kind not in "fV":  # ("V": bfloat16)
        return cast(x, default_float)
    return x


def add(a: Any, b: Any, *, alpha: Any = None) -> Tensor:
    """a + b (or a + alpha * b)."""
    if alpha is not None and alpha != 1:
        b = mul(b, alpha)
    return _binary("add", a, b)


def sub(a: Any, b: Any, *, alpha: Any = None) -> Tensor:
    """a - b (or a - alpha * b)."""
    if alpha is not None and alpha != 1:
        b = mul(b, alpha)
    return _binary("sub", a, b)


def rsub(a: Any, b: Any) -> Tensor:
    """b - a."""
    return _binary("sub", b, a)


def mul(a: Any, b: Any) -> Tensor:
    return _binary("mul", a, b)


def div(a: Any, b: Any, *, rounding_mode: str | None = None) -> Tensor:
    """True division; integer operands give floats. rounding_mode 'floor'/'trunc' as in PyTorch."""
    a, b = _operands(a, b)
    if rounding_mode is None:
        if a._data.dtype.kind not in "fV":
            a, b = cast(a, default_float), cast(b, default_float)
        return bind(_P["div"], (a, b), {})
    if rounding_mode == "floor":
        return _floor_divide(a, checked_divisor("div(rounding_mode='floor')", a, b))
    if rounding_mode == "trunc":  # round toward zero; integer operands stay integers
        q = div(a, checked_divisor("div(rounding_mode='trunc')", a, b))
        t = where(lt(q, 0), ceil(q), floor(q))
        return cast(t, a.dtype) if a._data.dtype.kind not in "fV" else t
    raise ValueError(f"div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")


def floor_divide(a: Any, b: Any) -> Tensor:
    """floor(a / b), Python's //. Integer division by zero raises, as in PyTorch."""
    if not (isinstance(a, Tensor) and isinstance(b, Tensor) and a._data.dtype is b._data.dtype):
        a, b = _operands(a, b)
    if a._data.dtype.kind not in "fV":
        b = checked_divisor("floor_divide", a, b)
    return bind_binary(_P["floor_divide"], a, b)


def _floor_divide(a: Tensor, b: Tensor) -> Tensor:
    """`floor_divide` of operands of one dtype, without the zero check."""
    return bind_binary(_P["floor_divide"], a, b)


def remainder(a: Any, b: Any) -> Tensor:
    """a mod b with the sign of b (Python's %); the gradient is 1 for a and -floor(a / b) for b.

    Integer remainder by zero raises, as in PyTorch.
    """
    a, b = _operands(a, b)
    b = checked_divisor("remainder", a, b)
    return sub(a, mul(_floor_divide(a, b), b))


def pow(a: Any, b: Any) -> Tensor:  # noqa: A001 - mirrors torch.pow
    """a ** b. A scalar exponent keeps the tensor's dtype."""
    if isinstance(a, Tensor) and a._data.dtype.kind not in "fV" and isinstance(b, float):
        a = cast(a, default_float)
    return _binary("pow", a, b)


def maximum(a: Any, b: Any) -> Tensor:
    return _binary("maximum", a, b)


def minimum(a: Any, b: Any) -> Tensor:
    return _binary("minimum", a, b)


def lt(a: Any, b: Any) -> Tensor:
    return _binary("lt", a, b)


def le(a: Any, b: Any) -> Tensor:
    return _binary("le", a, b)


def gt(a: Any, b: Any) -> Tensor:
    return _binary("gt", a, b)


def ge(a: Any, b: Any) -> Tensor:
    return _binary("ge", a, b)


def eq(a: Any, b: Any) -> Tensor:
    return _binary("eq", a, b)


def ne(a: Any, b: Any) -> Tensor:
    return _binary("ne", a, b)


def logical_and(a: Any, b: Any) -> Tensor:
    return _binary("logical_and", cast(_as_tensor(a), bool_), cast(_as_tensor(b), bool_))


def logical_or(a: Any, b: Any) -> Tensor:
    return _binary("logical_or", cast(_as_tensor(a), bool_), cast(_as_tensor(b), bool_))


def logical_not(x: Tensor) -> Tensor:
    return bind(_P["logical_not"], (cast(x, bool_),), {})


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """a where cond is true, else b (all broadcast)."""
    cond = _as_tensor(cond)
    if cond._data.dtype.kind != "b":
        cond = cast(cond, bool_)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = _as_tensor(a)
        if a._data.dtype.kind == "f" and a.dtype is not default_float:
            a = cast(a, default_float)
    a, b = _operands(a, b)
    return bind(_P["where"], (cond, a, b), {})


def _unary(name: str, x: Any) -> Tensor:
    return bind(_P[name], (_floating(x),), {})


def neg(x: Any) -> Tensor:
    x = _as_tensor(x)
    return bind(_P["neg"], (x,), {})


def exp(x: Any) -> Tensor:
    return _unary("exp", x)


def log(x: Any) -> Tensor:
    return _unary("log", x)


def log1p(x: Any) -> Tensor:
    return _unary("log1p", x)


def sin(x: Any) -> Tensor:
    return _unary("sin", x)


def cos(x: Any) -> Tensor:
    return _unary("cos", x)


def sqrt(x: Any) -> Tensor:
    return _unary("sqrt", x)


def rsqrt(x: Any) -> Tensor:
    return pow(_floating(x), -0.5)


def reciprocal(x: Any) -> Tensor:
    x = _floating(x)
    return div(_const(1, x.dtype, x), x)


def tanh(x: Any) -> Tensor:
    return _unary("tanh", x)


def sigmoid(x: Any) -> Tensor:
    return _unary("sigmoid", x)


def relu(x: Any) -> Tensor:
    return bind(_P["relu"], (_as_tensor(x),), {})


def erf(x: Any) -> Tensor:
    return _unary("erf", x)


def abs(x: Any) -> Tensor:  # noqa: A001 - mirrors torch.abs
    return bind(_P["abs"], (_as_tensor(x),), {})


def sign(x: Any) -> Tensor:
    return bind(_P["sign"], (_as_tensor(x),), {})


def square(x: Any) -> Tensor:
    return mul(x, x)


def clamp(x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    """Limit x to [min, max]; the gradient is 1 inside, 0 where clamped (as PyTorch)."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    out = x
    if min is not None:  # bounds promote and broadcast like any operand (torch.clamp does too)
        out, lo_t = _operands(out, min)
        out = where(lt(out, lo_t), lo_t, out)
    if max is not None:
        out, hi_t = _operands(out, max)
        out = where(gt(out, hi_t), hi_t, out)
    return out


clip = clamp


def isnan(x: Tensor) -> Tensor:
    return ne(x, x)


def isinf(x: Tensor) -> Tensor:
    return eq(abs(x), _math.inf)


def isfinite(x: Tensor) -> Tensor:
    return logical_not(logical_or(isnan(x), isinf(x)))


def _rounding(name: str, x: Any) -> Tensor:
    x = _as_tensor(x)
    return x if x._data.dtype.kind not in "fV" else bind(_P[name], (x,), {})  # integers are already whole


def floor(x: Tensor) -> Tensor:
    return _rounding("floor", x)


def ceil(x: Tensor) -> Tensor:
    return _rounding("ceil", x)


def round(x: Tensor) -> Tensor:  # noqa: A001
    """Round half to even (as PyTorch)."""
    return _rounding("round", x)


# ---- reductions -------------------------------------------------------------------
def normalize_axes(dims: Any, ndim: int, op: str = "reduce") -> tuple[int, ...]:
    """Axes as sorted non-negative ints; None means all. Out of range raises IndexError."""
    if dims is None:
        return tuple(range(ndim))
    if dims.__class__ is int and -ndim <= dims < ndim:  # the common case, quickly
        return (dims % ndim,)
    if isinstance(dims, (int, np.integer)):
        dims = (int(dims),)
    out = []
    span = builtins.max(ndim, 1)
    for d in dims:
        if not -span <= d < span:
            raise IndexError(f"{op}: dimension {d} is out of range for a tensor with {ndim} dims "
                             f"(expected in [{-span}, {span - 1}])")
        out.append(d % span)
    return tuple(sorted(set(out)))


def _reduce_args(dim: Any, axis: Any, keepdim: Any, keepdims: Any) -> tuple[Any, bool]:
    """Accept PyTorch's dim/keepdim and NumPy's axis/keepdims spellings."""
    if dim is not None and axis is not None:
        raise TypeError("pass either dim or axis, not both")
    keep = bool(keepdim) or bool(keepdims)
    return (dim if dim is not None else axis), keep


def _count(n: Any) -> Any:
    """An element count as a float divisor; symbolic counts (dynamic_dims) stay symbolic."""
    return n if getattr(n, "expr", None) is not None else float(n)


def sum(x: Any, dim: Any = None, keepdim: bool = False, *, axis: Any = None,  # noqa: A001
        keepdims: bool = False, dtype: Any = None) -> Tensor:
    """Sum over `dim` (all dims when None)."""
    x = _as_tensor(x)
    dims, keep = _reduce_args(dim, axis, keepdim, keepdims)
    if dtype is not None:
        x = cast(x, dtype)
    elif x._data.dtype.kind == "b":
        x = cast(x, "int64")
    axes = normalize_axes(dims, x.ndim, "sum")
    return bind(_P["sum"], (x,), {"axes": axes, "keepdims": keep})  # a new tensor even for 0-d x


def mean(x: Any, dim: Any = None, keepdim: bool = False, *, axis: Any = None,
         keepdims: bool = False, dtype: Any = None) -> Tensor:
    """Mean over `dim` (all dims when None)."""
    x = _floating(x) if dtype is None else cast(_as_tensor(x), dtype)
    dims, keep = _reduce_args(dim, axis, keepdim, keepdims)
    axes = normalize_axes(dims, x.ndim, "mean")
    count = _math.prod(x.shape[a] for a in axes) if x.ndim else 1
    return div(sum(x, axes, keep), _count(count))


def var(x: Any, dim: Any = None, keepdim: bool = False, *, unbiased: bool | None = None,
        correction: int | None = None, axis: Any = None, keepdims: bool = False, ddof: int | None = None) -> Tensor:
    """Variance over `dim`. Default correction is 1 (unbiased, as PyTorch); NumPy's ddof works too."""
    x = _floating(x)
    dims, keep = _reduce_args(dim, axis, keepdim, keepdims)
    axes = normalize_axes(dims, x.ndim, "var")
    if ddof is not None:
        corr = ddof
    elif correction is not None:
        corr = correction
    elif unbiased is not None:
        corr = 1 if unbiased else 0
    else:
        corr = 1
    count = _math.prod(x.shape[a] for a in axes) if x.ndim else 1
    centered = sub(x, mean(x, axes, True))
    return div(sum(mul(centered, centered), axes, keep), _count(builtins.max(count - corr, 0)))


def std(x: Any, dim: Any = None, keepdim: bool = False, *, unbiased: bool | None = None,
        correction: int | None = None, axis: Any = None, keepdims: bool = False, ddof: int | None = None) -> Tensor:
    """Standard deviation over `dim` (correction 1 by default)."""
    return sqrt(var(x, dim, keepdim, unbiased=unbiased, correction=correction, axis=axis,
                    keepdims=keepdims, ddof=ddof))


def amax(x: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Maximum over `dim`; ties share the gradient evenly."""
    dims, keep = _reduce_args(dim, axis, keepdim, keepdims)
    axes = normalize_axes(dims, x.ndim, "amax")
    return bind(_P["max"], (x,), {"axes": axes, "keepdims": keep})  # a new tensor even for 0-d x


def amin(x: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None, keepdims: bool = False) -> Tensor:
    return neg(amax(neg(x), dim, keepdim, axis=axis, keepdims=keepdims))


def argmax(x: Tensor, dim: int | None = None, keepdim: bool = False, *, axis: int | None = None,
           keepdims: bool = False) -> Tensor:
    """Index of the first maximum along `dim` (flattened when None)."""
    d, keep = _reduce_args(dim, axis, keepdim, keepdims)
    axis_n = None if d is None else normalize_axes(d, x.ndim, "argmax")[0]
    if x.ndim == 0:
        axis_n = None
    return bind(_P["argmax"], (x,), {"axis": axis_n, "keepdims": keep})


def argmin(x: Tensor, dim: int | None = None, keepdim: bool = False, *, axis: int | None = None,
           keepdims: bool = False) -> Tensor:
    src = neg(x) if x._data.dtype.kind != "b" else logical_not(x)
    return argmax(src, dim, keepdim, axis=axis, keepdims=keepdims)


class _MaxResult(tuple):
    """(values, indices), as returned by max(x, dim)."""

    @property
    def values(self) -> Tensor:
        return self[0]

    @property
    def indices(self) -> Tensor:
        return self[1]


def max(x: Any, dim: Any = None, keepdim: bool = False, *, axis: Any = None,  # noqa: A001
        keepdims: bool = False) -> Any:
    """max(x) -> the max; max(x, dim) -> (values, indices); max(a, b) -> maximum."""
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    d, keep = _reduce_args(dim, axis, keepdim, keepdims)
    if d is None:
        return amax(x)
    if axis is not None:
        return amax(x, d, keep)
    return _values_and_indices(x, d, keep, argmax)


def min(x: Any, dim: Any = None, keepdim: bool = False, *, axis: Any = None,  # noqa: A001
        keepdims: bool = False) -> Any:
    """min(x) -> the min; min(x, dim) -> (values, indices); min(a, b) -> minimum."""
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    d, keep = _reduce_args(dim, axis, keepdim, keepdims)
    if d is None:
        return amin(x)
    if axis is not None:
        return amin(x, d, keep)
    return _values_and_indices(x, d, keep, argmin)


def _values_and_indices(x: Tensor, dim: Any, keep: bool, arg: Any) -> _MaxResult:
    """(values, indices) of max/min along dim. The values are gathered at the indices, so the
    gradient goes to that one element even when there are ties (as PyTorch's max(dim) does)."""
    if x.ndim == 0:
        return _MaxResult((amax(x) if arg is argmax else amin(x), arg(x)))
    d = normalize_axes(dim, x.ndim, "max")[0]
    idx = arg(x, d, True)
    values = bind(_P["gather"], (x, idx), {"axis": d})  # (idx is x's shape but along d, and in range)
    if not keep:
        values, idx = squeeze_dims(values, (d,)), squeeze_dims(idx, (d,))
    return _MaxResult((values, idx))


def logsumexp(x: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None,
              keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))) computed stably by shifting by the (detached) max.

    An empty reduction gives -inf, the log of an empty sum (as PyTorch).
    """
    dims, keep = _reduce_args(dim, axis, keepdim, keepdims)
    x = _floating(x)
    axes = normalize_axes(dims, x.ndim, "logsumexp")
    if 0 in tuple(x.shape):  # no elements: no max to shift by, and nothing to overflow
        out = log(sum(exp(x), axes, True))
    else:
        m = amax(x, axes, True).detach()
        m = where(isfinite(m), m, 0.0)  # a scalar, not a zeros array of a baked-in shape
        out = add(log(sum(exp(sub(x, m)), axes, True)), m)
    if not keep:
        out = squeeze_dims(out, axes)
    return out


def cumsum(x: Tensor, dim: int | None = None, *, axis: int | None = None, dtype: Any = None) -> Tensor:
    d = dim if dim is not None else axis
    if d is None:
        raise TypeError("cumsum() needs dim")
    if dtype is not None:
        x = cast(x, dtype)
    elif x._data.dtype.kind == "b":
        x = cast(x, "int64")
    return bind(_P["cumsum"], (x,), {"axis": normalize_axes(d, x.ndim, "cumsum")[0]})


def prod(x: Any, dim: Any = None, keepdim: bool = False, *, axis: Any = None, keepdims: bool = False,
         dtype: Any = None) -> Tensor:
    """Product over `dim` (all dims when None); differentiable, zeros included."""
    x = _as_tensor(x)
    dims, keep = _reduce_args(dim, axis, keepdim, keepdims)
    if dtype is not None:
        x = cast(x, dtype)
    elif x._data.dtype.kind == "b":
        x = cast(x, "int64")
    return bind(_P["prod"], (x,), {"axes": normalize_axes(dims, x.ndim, "prod"), "keepdims": keep})


def any(x: Any, dim: Any = None, keepdim: bool = False, *, axis: Any = None,  # noqa: A001
        keepdims: bool = False) -> Tensor:
    """True where any element along `dim` is nonzero."""
    x = _as_tensor(x)
    dims, keep = _reduce_args(dim, axis, keepdim, keepdims)
    count = bind(_P["sum"], (cast(x, bool_),), {"axes": normalize_axes(dims, x.ndim, "any"), "keepdims": keep})
    return ne(count, 0)


def all(x: Any, dim: Any = None, keepdim: bool = False, *, axis: Any = None,  # noqa: A001
        keepdims: bool = False) -> Tensor:
    """True where every element along `dim` is nonzero."""
    return logical_not(any(logical_not(_as_tensor(x)), dim, keepdim, axis=axis, keepdims=keepdims))


def norm(x: Tensor, p: float = 2.0, dim: Any = None, keepdim: bool = False) -> Tensor:
    """The p-norm over dim (all dims when None)."""
    if p == 2:
        return sqrt(sum(mul(x, x), dim, keepdim))
    if p == 1:
        return sum(abs(x), dim, keepdim)
    if p == _math.inf:
        return amax(abs(x), dim, keepdim)
    return pow(sum(pow(abs(x), float(p)), dim, keepdim), 1.0 / p)


# ---- linear algebra ---------------------------------------------------------------
def matmul(a: Tensor, b: Tensor) -> Tensor:
    """Matrix product with NumPy semantics: 1-D operands are promoted and squeezed back."""
    if getattr(a, "is_sparse", False):  # a sparse tensor's own product (kiln.sparse builds on kiln.functional)
        return a.matmul(b)
    if getattr(b, "is_sparse", False):
        return b.__rmatmul__(a)
    a, b = _as_tensor(a), _as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: both operands need at least 1 dim, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if a._data.dtype != b._data.dtype:
        a, b = _operands(a, b)
    if a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:  # name the user's shapes, before 1-D promotion
        raise ShapeError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not align (inner "
                         f"dimensions {a.shape[-1]} and {b.shape[-2 if b.ndim > 1 else 0]} differ)")
    squeeze_a = a.ndim == 1
    squeeze_b = b.ndim == 1
    if squeeze_a:
        a = reshape(a, (1, a.shape[0]))
    if squeeze_b:
        b = reshape(b, (b.shape[0], 1))
    out = bind(_P["matmul"], (a, b), {})
    if squeeze_a and squeeze_b:
        return reshape(out, out.shape[:-2])
    if squeeze_a:
        return reshape(out, out.shape[:-2] + out.shape[-1:])
    if squeeze_b:
        return reshape(out, out.shape[:-1])
    return out


def mm(a: Tensor, b: Tensor) -> Tensor:
    return matmul(a, b)


def bmm(a: Tensor, b: Tensor) -> Tensor:
    return matmul(a, b)


def einsum(spec: str, *operands: Tensor) -> Tensor:
    """Two-operand einsum with an explicit output: ``einsum('bij,bjk->bik', a, b)``."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if len(operands) != 2:
        raise ValueError(f"einsum: exactly two operands are supported, got {len(operands)}")
    a, b = _operands(*operands)
    return bind(_P["einsum"], (a, b), {"spec": spec.replace(" ", "")})


def outer(a: Tensor, b: Tensor) -> Tensor:
    return mul(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def dot(a: Tensor, b: Tensor) -> Tensor:
    return sum(mul(a, b))


def sum_to(g: Tensor, shape: Sequence[int]) -> Tensor:
    """Sum `g` down to `shape` (the inverse of broadcasting), used by VJPs."""
    shape = tuple(shape)
    if g.ndim == len(shape) and tuple(g.shape) == shape:  # (lengths first: tuple == compares items first,
        return g                                          # and each symbolic size compared is a shape guard)
    if g.ndim < len(shape):  # `shape` has extra leading 1s (x[i] = v with v of shape (1, n))
        g = reshape(g, (1,) * (len(shape) - g.ndim) + tuple(g.shape))
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, d in enumerate(shape) if d == 1 and g.shape[i + lead] != 1
    )
    out = bind(_P["sum"], (g,), {"axes": axes, "keepdims": True}) if axes else g
    if lead or tuple(out.shape) != shape:
        out = reshape(out, shape)
    return out
