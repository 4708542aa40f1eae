"""Creation primitives with no tensor inputs: full and arange."""
from __future__ import annotations

import math

from ..dtypes import get_dtype
from .primitive import AbstractValue, Primitive


class Full(Primitive):
    name = "full"

    def abstract(self, *, shape, value, dtype, device):
        return AbstractValue(tuple(shape), get_dtype(dtype))

    def kernel(self, xp, *, shape, value, dtype, device):
        return xp.full(shape, value, dtype=get_dtype(dtype).np)


class Arange(Primitive):
    name = "arange"

    def abstract(self, *, start, stop, step, dtype, device):
        return AbstractValue((max(0, math.ceil((stop - start) / step)),), get_dtype(dtype))

    def kernel(self, xp, *, start, stop, step, dtype, device):
        return xp.arange(start, stop, step, dtype=get_dtype(dtype).np)
