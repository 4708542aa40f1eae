"""PyTorch's compound math and its aliases, written in kiln ops: addmm, addcmul, lerp, logaddexp, ...

Each is a composition of primitives, so it is differentiable, and kiln.compile sees through it and fuses it
like any other code. ``log2``, ``log10``, ``expm1`` and ``trunc`` are primitives of their own (NumPy's ufuncs:
``log2(8.0)`` is exactly 3).

>>> kiln.addcmul(kiln.zeros(3), kiln.ones(3), kiln.full((3,), 2.0), value=0.5)   # [1, 1, 1]
>>> kiln.lerp(kiln.zeros(2), kiln.ones(2), 0.25)                                   # [0.25, 0.25]
"""
from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .math import (_as_tensor, _floating, _operands, _rounding, _unary, abs, add, bmm, cast, clamp, div, eq, exp, gt,
                   isinf, isnan, log, log1p, logical_and, logical_not, lt, matmul, maximum, mean, mul, ne, outer, sign,
                   std, sub, sum, var, where)
from .shape import cat, narrow


# ---- products with a scaled sum -------------------------------------------------------------------------
def _scaled_sum(input: Any, product: Tensor, beta: Any, alpha: Any) -> Tensor:  # noqa: A002
    """beta * input + alpha * product. With beta 0 the input is ignored, NaNs included, as in PyTorch (and it gets
    no gradient, where PyTorch gives it zeros)."""
    if alpha != 1:
        product = mul(product, alpha)
    if beta == 0:
        return product
    return add(input if beta == 1 else mul(input, beta), product)


def _check_rank(op: str, **operands: tuple[Any, int]) -> None:
    """Raise a ShapeError naming the operand unless each (value, rank) is a tensor of that many dims."""
    for name, (value, rank) in operands.items():
        t = _as_tensor(value)
        if t.ndim != rank:
            raise ShapeError(f"{op}: {name} must be a {rank}-D tensor, got shape {tuple(t.shape)}")


def addmm(input: Any, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # noqa: A002
    """beta * input + alpha * (mat1 @ mat2), for matrices; input broadcasts to the product's shape."""
    _check_rank("addmm", mat1=(mat1, 2), mat2=(mat2, 2))
    return _scaled_sum(input, matmul(mat1, mat2), beta, alpha)


def addmv(input: Any, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # noqa: A002
    """beta * input + alpha * (mat @ vec)."""
    _check_rank("addmv", mat=(mat, 2), vec=(vec, 1))
    return _scaled_sum(input, matmul(mat, vec), beta, alpha)


def addr(input: Any, vec1: Tensor, vec2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # noqa: A002
    """beta * input + alpha * outer(vec1, vec2)."""
    _check_rank("addr", vec1=(vec1, 1), vec2=(vec2, 1))
    return _scaled_sum(input, outer(vec1, vec2), beta, alpha)


def baddbmm(input: Any, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # noqa: A002
    """beta * input + alpha * (batch1 @ batch2), batch by batch (attention scores often read so)."""
    _check_rank("baddbmm", batch1=(batch1, 3), batch2=(batch2, 3))
    return _scaled_sum(input, bmm(batch1, batch2), beta, alpha)


def addbmm(input: Any, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:  # noqa: A002
    """beta * input + alpha * the sum over the batch of batch1[b] @ batch2[b]."""
    _check_rank("addbmm", batch1=(batch1, 3), batch2=(batch2, 3))
    return _scaled_sum(input, sum(bmm(batch1, batch2), 0), beta, alpha)


def addcmul(input: Any, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:  # noqa: A002
    """input + value * tensor1 * tensor2 (an optimizer's moment update)."""
    product = mul(tensor1, tensor2) if value == 1 else mul(mul(tensor1, value), tensor2)
    return add(input, product)


def addcdiv(input: Any, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:  # noqa: A002
    """input + value * tensor1 / tensor2 (Adam's step: ``p.addcdiv_(m, v.sqrt() + eps, value=-lr)``)."""
    for t in (tensor1, tensor2):
        if isinstance(t, Tensor) and t._data.dtype.kind not in "fV":
            raise TypeError("addcdiv: integer division with addcdiv is not supported (as in PyTorch); "
                            "pass float tensors, or use (tensor1 / tensor2) explicitly")
    quotient = div(tensor1, tensor2) if value == 1 else div(mul(tensor1, value), tensor2)
    return add(input, quotient)


def lerp(input: Tensor, end: Any, weight: Any) -> Tensor:  # noqa: A002
    """input + weight * (end - input), computed as PyTorch does: from `end` when weight >= 0.5, so a weight
    of 1 gives `end` exactly (an exponential moving average: ``ema.lerp_(p, 1 - decay)``)."""
    diff = sub(end, input)
    if not isinstance(weight, Tensor):
        if builtins.abs(weight) < 0.5:
            return add(input, mul(diff, weight))
        return sub(end, mul(diff, 1.0 - weight))
    low = add(input, mul(weight, diff))
    high = sub(end, mul(diff, sub(1.0, weight)))
    return where(lt(abs(weight), 0.5), low, high)


def clamp_min(input: Tensor, min: Any) -> Tensor:  # noqa: A002
    """clamp(input, min=min)."""
    return clamp(input, min=min)


def clamp_max(input: Tensor, max: Any) -> Tensor:  # noqa: A002
    """clamp(input, max=max)."""
    return clamp(input, max=max)


# ---- exponentials, logarithms and rounding ---------------------------------------------------------------
def log2(x: Any) -> Tensor:
    """The base-2 logarithm (NumPy's, exact at powers of two)."""
    return _unary("log2", x)


def log10(x: Any) -> Tensor:
    """The base-10 logarithm."""
    return _unary("log10", x)


def expm1(x: Any) -> Tensor:
    """exp(x) - 1, accurate near 0."""
    return _unary("expm1", x)


def trunc(x: Any) -> Tensor:
    """Round toward zero (integers are already whole); the gradient is 0."""
    return _rounding("trunc", x)


fix = trunc


def frac(x: Any) -> Tensor:
    """The fractional part, with x's sign: x - trunc(x)."""
    x = _as_tensor(x)
    return sub(x, trunc(x))


def sgn(x: Any) -> Tensor:
    """sign(x) for real tensors (PyTorch's sgn extends sign to complex numbers, which kiln has not)."""
    return sign(x)


def logaddexp(a: Any, b: Any) -> Tensor:
    """log(exp(a) + exp(b)) without overflow; equal infinities give themselves."""
    a, b = _operands(a, b)
    a, b = _floating(a), _floating(b)
    spread = log1p(exp(mul(abs(sub(a, b)), -1.0)))
    return where(logical_and(isinf(a), eq(a, b)), a, add(maximum(a, b), spread))


def xlogy(x: Any, y: Any) -> Tensor:
    """x * log(y), 0 where x is 0 (unless y is NaN), as in PyTorch."""
    x, y = _operands(x, y)
    x, y = _floating(x), _floating(y)
    return where(logical_and(eq(x, 0.0), logical_not(isnan(y))), 0.0, mul(x, log(y)))


def logit(x: Any, eps: float | None = None) -> Tensor:
    """log(x / (1 - x)); with `eps`, x is first clamped to [eps, 1 - eps]."""
    x = _floating(x)
    if eps is not None:
        x = clamp(x, eps, 1.0 - eps)
    return log(div(x, sub(1.0, x)))


def nan_to_num(x: Any, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
    """NaN, +inf and -inf replaced by `nan`, `posinf` and `neginf` (by default the dtype's largest and
    smallest finite values)."""
    x = _as_tensor(x)
    if x._data.dtype.kind not in "fV":
        return x
    info = np.finfo(np.float32 if x._data.dtype.kind == "V" else x._data.dtype)
    high = float(info.max) if posinf is None else posinf
    low = float(info.min) if neginf is None else neginf
    out = where(isnan(x), nan, x)
    return where(isinf(x), where(gt(x, 0.0), high, low), out)


# ---- reductions ------------------------------------------------------------------------------------------
def count_nonzero(x: Tensor, dim: Any = None) -> Tensor:
    """The number of non-zero elements over `dim` (all dims when None), as int64."""
    return sum(ne(x, 0), dim)


def nansum(x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """The sum over `dim`, NaNs counted as zero."""
    x = _as_tensor(x)
    if x._data.dtype.kind in "fV":
        x = where(isnan(x), 0.0, x)
    return sum(x, dim, keepdim, dtype=dtype)


def nanmean(x: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """The mean over `dim` of the elements that are not NaN."""
    x = _floating(x) if dtype is None else cast(_as_tensor(x), dtype)
    counted = cast(logical_not(isnan(x)), x.dtype)
    return div(nansum(x, dim, keepdim), sum(counted, dim, keepdim))


def std_mean(x: Tensor, dim: Any = None, *, correction: Any = None, unbiased: bool | None = None,
             keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """(std, mean) over `dim` (correction 1 by default)."""
    return (std(x, dim, keepdim, unbiased=unbiased, correction=correction),
            mean(x, dim, keepdim))


def var_mean(x: Tensor, dim: Any = None, *, correction: Any = None, unbiased: bool | None = None,
             keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """(var, mean) over `dim` (correction 1 by default)."""
    return (var(x, dim, keepdim, unbiased=unbiased, correction=correction),
            mean(x, dim, keepdim))


def diff(x: Tensor, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Tensor:
    """The n-th forward difference along `dim`, after joining `prepend` and `append` there."""
    if n < 0:
        raise ValueError(f"diff: order must be non-negative, got {n}")
    if x.ndim == 0:
        raise ShapeError("diff: expected at least a 1-D tensor, got a 0-d one")
    d = dim % x.ndim
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = cat([_as_tensor(p) for p in parts], d)
    for _ in range(n):
        length = x.shape[d]
        if length == 0:
            break
        later, earlier = narrow(x, d, 1, length - 1), narrow(x, d, 0, length - 1)
        x = ne(later, earlier) if x._data.dtype.kind == "b" else sub(later, earlier)
    return x
