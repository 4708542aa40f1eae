"""Creation primitives with no tensor inputs: full and arange."""
from __future__ import annotations

import math

from ..dtypes import get_dtype
from ..sizes import is_int
from .primitive import AbstractValue, Primitive


class Full(Primitive):
    name = "full"

    def abstract(self, *, shape, value, dtype, device):
        return AbstractValue(tuple(shape), get_dtype(dtype))

    def kernel(self, xp, *, shape, value, dtype, device):
        if getattr(value, "expr", None) is not None:  # traced: its value now (CuPy reads no __array__)
            value = value.value
        return xp.full(shape, value, dtype=get_dtype(dtype).np)


class Arange(Primitive):
    name = "arange"

    def abstract(self, *, start, stop, step, dtype, device):
        if all(is_int(v) for v in (start, stop, step)):  # integer ranges keep symbolic sizes
            length = max(0, (stop - start + step - 1) // step) if step > 0 else max(0, (start - stop - step - 1) // -step)
        else:
            length = max(0, math.ceil((stop - start) / step))
        return AbstractValue((length,), get_dtype(dtype))

    def kernel(self, xp, *, start, stop, step, dtype, device):
        return xp.arange(start, stop, step, dtype=get_dtype(dtype).np)
