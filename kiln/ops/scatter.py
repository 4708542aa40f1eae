"""The scatter_reduce primitive: a copy of `base` with `src` combined in at idx along `axis`
by a product, a maximum or a minimum (sums and means are built on scatter_add).

With ``include_self=False`` the positions that receive a value start from the reduction's
identity instead of `base`'s value. The VJP is written in kiln ops
(kiln/functional/scatter.py): a maximum's gradient is shared evenly among the values that
equal it, a product's goes through the other factors (zeros included).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .movement import _scatter_index
from .primitive import AbstractValue, Primitive, ShapeError
from .ufunc_at import ufunc_at

UFUNCS = {"prod": "multiply", "amax": "maximum", "amin": "minimum"}


def identity(reduce: str, dtype: Any) -> Any:
    """The value a reduction starts from: 1 for a product, the lowest value for a maximum, ..."""
    if reduce == "prod":
        return 1
    if dtype.kind == "b":
        return reduce == "amin"
    low, high = (-np.inf, np.inf) if dtype.kind == "f" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
    return low if reduce == "amax" else high


class ScatterReduce(Primitive):
    """base with src reduced in at idx along `axis` (src has idx's shape); reduce is prod, amax or amin."""

    name = "scatter_reduce"
    saves_inputs = (0, 1, 2)
    saves_output = True

    def abstract(self, base: AbstractValue, idx: AbstractValue, src: AbstractValue, *, axis: int, reduce: str,
                 include_self: bool) -> AbstractValue:
        if tuple(idx.shape) != tuple(src.shape):
            raise ShapeError(f"scatter_reduce: index shape {tuple(idx.shape)} != source shape {tuple(src.shape)}")
        if reduce not in UFUNCS:
            raise ValueError(f"scatter_reduce primitive: reduce must be one of {sorted(UFUNCS)}, got {reduce!r}")
        return base

    def kernel(self, xp, base, idx, src, *, axis, reduce, include_self):
        out = base.copy()
        where = _scatter_index(xp, idx, axis)
        if not include_self:
            out[where] = identity(reduce, base.dtype)
        try:
            ufunc_at(xp, getattr(xp, UFUNCS[reduce]), out, where, src)
        except (AttributeError, NotImplementedError):
            if xp is np:
                raise
            # an array module without this ufunc's `at` (CuPy has no multiply.at): reduce on the host
            host = [xp.asnumpy(a) for a in (base, idx, src)]
            out = xp.asarray(self.kernel(np, *host, axis=axis, reduce=reduce, include_self=include_self))
        return out

    def vjp(self, g, inputs, node, *, axis, reduce, include_self):
        from ..functional.scatter import scatter_reduce_vjp  # noqa: PLC0415

        base, idx, src = inputs
        gb, gs = scatter_reduce_vjp(g, base, idx, src, node.output(), axis, reduce, include_self)
        return (gb if base.requires_grad else None, None, gs if src.requires_grad else None)
