"""Random primitives. The generator state arrives as a runtime input tensor
``key = [seed, offset]`` (int64), so a compiled plan can be replayed with fresh state."""
from __future__ import annotations

import math

from ..dtypes import get_dtype
from ..random import philox_bits
from .primitive import AbstractValue, Primitive


def uniform_count(shape: tuple) -> int:
    """How many 32-bit values `uniform` consumes for `shape`."""
    return math.prod(shape)


def normal_count(shape: tuple) -> int:
    """How many 32-bit values `normal` consumes (Box-Muller uses pairs)."""
    n = math.prod(shape)
    return n + n % 2  # (not n & 1: `%` keeps a symbolic size symbolic)


def _uniform(xp, key, n, dtype=None):
    """n uniform floats in [0, 1), each 24 random bits: exact in float32 and float64 alike.

    `dtype` float32 computes in float32 directly (the same values, at half the memory traffic);
    anything else gets float64, rounded by the caller.
    """
    bits = philox_bits(xp, int(key[0]), int(key[1]), n) >> 8
    if dtype == xp.float32:
        values = bits.astype(xp.float32)  # 24-bit integers: exact
        values *= xp.float32(1.0 / (1 << 24))  # a power of two: exact
        return values
    return bits.astype(xp.float64) * (1.0 / (1 << 24))


class Uniform(Primitive):
    """Uniform [0, 1) floats of `shape` from stream position key = (seed, offset)."""

    name = "uniform"
    is_random = True

    def abstract(self, key, *, shape, dtype):
        return AbstractValue(tuple(shape), get_dtype(dtype))

    def kernel(self, xp, key, *, shape, dtype):
        np_dtype = get_dtype(dtype).np
        return _uniform(xp, key, uniform_count(shape), np_dtype).astype(np_dtype, copy=False).reshape(shape)


class Normal(Primitive):
    """Standard normal floats of `shape` by Box-Muller from key = (seed, offset)."""

    name = "normal"
    is_random = True

    def abstract(self, key, *, shape, dtype):
        return AbstractValue(tuple(shape), get_dtype(dtype))

    def kernel(self, xp, key, *, shape, dtype):
        n = math.prod(shape)
        u = _uniform(xp, key, normal_count(shape)).reshape(-1, 2)
        radius = xp.sqrt(-2.0 * xp.log1p(-u[:, 0]))  # 1 - u in (0, 1]: log is finite
        angle = 2.0 * math.pi * u[:, 1]
        z = xp.stack([radius * xp.cos(angle), radius * xp.sin(angle)], axis=1).reshape(-1)[:n]
        return z.astype(get_dtype(dtype).np).reshape(shape)
