"""Bernoulli draws and discrete uniform integers from kiln's counter-based stream.

``kiln.bernoulli`` and the values behind ``Tensor.bernoulli_`` and ``Tensor.random_`` are
built from ``kiln.rand`` draws and elementwise ops, so a compiled function draws exactly
the numbers eager code draws (``kiln.manual_seed``, or a ``kiln.Generator``), and fresh
ones on every call.

>>> kiln.manual_seed(0)
>>> kiln.bernoulli(kiln.full((2, 3), 0.5))        # 0.0 or 1.0, float32
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..ops.checks import CheckProbability, ProbabilityError
from ..ops.primitive import REGISTRY, bind
from ..trace_state import trace_state
from ..random import Generator
from ..tensor import Tensor
from .creation import rand
from .math import add, cast, floor, lt, mul, remainder, where
from .shape import expand, select

_CHECK: CheckProbability = REGISTRY["check_probability"]  # type: ignore[assignment]
_MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}  # every integer up to 2**m is exact


class RandomRangeError(ValueError, RuntimeError):
    """A bad range for Tensor.random_: from >= to, or a bound the dtype cannot hold. PyTorch raises
    RuntimeError there; this is both a ValueError and a RuntimeError."""


def checked_probability(op: str, p: Tensor, fix: str | None = None) -> Tensor:
    """`p` after checking that it holds probabilities in [0, 1] (ProbabilityError, ending with `fix`
    when given); while tracing, a check node, so every compiled replay repeats the check."""
    params = {"op": op} if fix is None else {"op": op, "fix": fix}
    if trace_state.tracer is None:
        _CHECK.kernel(p._device._xp or p._device.xp, p._data, **params)
        return p
    return bind(_CHECK, (p,), params)


def _probability(op: str, p: Any, shape: tuple) -> Any:
    """A float `p` checked, or a tensor `p` checked and expanded to `shape`."""
    if isinstance(p, Tensor):
        if not p.is_floating_point():
            raise TypeError(f"{op}: probabilities p must be a float tensor, got {p.dtype.name}; use p.float()")
        return expand(checked_probability(op, p), *shape)
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise TypeError(f"{op}: p must be a number in [0, 1] or a float tensor, got {type(p).__name__}")
    if not 0.0 <= float(p) <= 1.0:
        raise ProbabilityError(f"{op}: p must be in [0, 1], got p={p}; pass a probability, e.g. 0.5")
    return float(p)


def bernoulli_mask(op: str, like: Tensor, p: Any, generator: Generator | None) -> Tensor:
    """A bool tensor of like's shape: True with probability p (a number, or a tensor broadcast to that shape)."""
    shape = tuple(like.shape)
    prob = _probability(op, p, shape)
    u = rand(*shape, dtype="float64", device=like.device, generator=generator)  # 24-bit draws, exact in float64
    return lt(u, prob)


def bernoulli(input: Tensor, p: float | None = None, *, generator: Generator | None = None) -> Tensor:  # noqa: A002
    """0/1 draws of input's shape and dtype: 1 with probability input (or with probability `p` when given).

    `input` is a float tensor of probabilities in [0, 1]. The result is not differentiable:
    input gets a zero gradient, as in PyTorch.

    >>> kiln.bernoulli(kiln.tensor([0.0, 0.5, 1.0]))   # tensor([0., 0. or 1., 1.])
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"bernoulli(): input must be a kiln.Tensor of probabilities, got {type(input).__name__}")
    if not input.is_floating_point():
        raise TypeError(f"bernoulli(): input must be a float tensor of probabilities, got {input.dtype.name}; "
                        "convert with .float()")
    draws = cast(bernoulli_mask("bernoulli", input, input if p is None else p, generator), input.dtype)
    return where(True, draws, input) if input.requires_grad else draws  # input: a zero gradient


def _bounds(x: Tensor, low: Any, high: Any) -> tuple[int, int]:
    """[low, high) for Tensor.random_ on x, defaults and checks as PyTorch's."""
    for name, v in (("from", low), ("to", high)):
        if v is not None and (isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer))):
            raise TypeError(f"random_(): '{name}' must be an int, got {type(v).__name__} ({v!r})")
    name = x.dtype.name
    if name == "bool":
        top = 2
    elif name in _MANTISSA:
        top = 2 ** _MANTISSA[name] + 1
    else:
        top = int(np.iinfo(x._data.dtype).max) + 1
    low = 0 if low is None else int(low)
    high = top if high is None else int(high)
    if low >= high:
        raise RandomRangeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}; "
                               "the values are drawn from [from, to - 1]")
    if name in _MANTISSA:
        limit = 2 ** _MANTISSA[name]
        if high - 1 > limit or low < -limit:
            warnings.warn(f"random_: [{low}, {high - 1}] reaches beyond [-(2^{_MANTISSA[name]}), 2^{_MANTISSA[name]}], "
                          f"where {name} holds every integer; some values cannot be drawn", UserWarning, stacklevel=4)
    else:
        info = (0, 1) if name == "bool" else (int(np.iinfo(x._data.dtype).min), int(np.iinfo(x._data.dtype).max))
        if not info[0] <= low <= info[1]:
            raise RandomRangeError(f"random_: from={low} is out of bounds for {name} [{info[0]}, {info[1]}]")
        if not info[0] <= high - 1 <= info[1]:
            raise RandomRangeError(f"random_: to - 1 = {high - 1} is out of bounds for {name} [{info[0]}, {info[1]}]")
    return low, high


def _chunks(shape: tuple, bits: tuple, x: Tensor, generator: Generator | None) -> list[Tensor]:
    """Independent int64 tensors of `shape`, the i-th uniform in [0, 2**bits[i]) (bits <= 24)."""
    u = rand(len(bits), *shape, dtype="float64", device=x.device, generator=generator)
    return [cast(floor(mul(select(u, 0, i), float(2 ** b))), "int64") for i, b in enumerate(bits)]


def _join(chunks: list[Tensor], bits: tuple) -> Tensor:
    """sum of chunk_i * 2**(bits before it), wrapping in int64."""
    total, shift = chunks[0], bits[0]
    for c, b in zip(chunks[1:], bits[1:]):
        total = add(total, mul(c, 2 ** shift))
        shift += b
    return total


def random_values(x: Tensor, low: Any = None, high: Any = None, generator: Generator | None = None) -> Tensor:
    """int64 values of x's shape, uniform over [low, high - 1] (PyTorch's defaults for x's dtype)."""
    low, high = _bounds(x, low, high)
    span, shape = high - low, tuple(x.shape)
    if span <= 2 ** 24:  # one 24-bit draw each, scaled (as kiln.randint)
        u = rand(*shape, dtype="float64", device=x.device, generator=generator)
        return add(cast(floor(mul(u, float(span))), "int64"), low)
    if span <= 2 ** 63:  # 63 random bits, reduced mod span
        r = _join(_chunks(shape, (24, 24, 15), x, generator), (24, 24, 15))
        return add(r if span == 2 ** 63 else remainder(r, span), low)
    # 2**63 < span <= 2**64 (int64 only): 64 bits U, then U mod span as U or U - span, all wrapping in int64
    c0, c1, c2 = _chunks(shape, (24, 24, 16), x, generator)
    u = _join([c0, c1, c2], (24, 24, 16))
    if span == 2 ** 64:
        return add(u, low)
    low_bits = _join([c0, c1, remainder(c2, 2 ** 15)], (24, 24, 15))  # U without its top bit
    wraps = where(lt(c2, 2 ** 15), False, lt(span - 2 ** 63 - 1, low_bits))  # U >= span
    return add(add(u, low), where(wraps, 2 ** 64 - span, 0))


__all__ = ["bernoulli"]
