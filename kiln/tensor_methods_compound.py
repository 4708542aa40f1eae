"""Tensor methods for PyTorch's compound ops, alternative names and selections (functional/compound.py,
aliases.py, rearrange.py and selection.py): ``x.addcmul_(a, b, value=v)``, ``x.lerp_(y, w)``, ``x.clamp_min(0)``, ``x.log2()``, ...

Each in-place form computes the out-of-place result and writes it into the tensor (tensor_methods.apply_inplace),
so views see it, autograd records it, and every tensor argument takes part in the checks.
"""
from __future__ import annotations

from typing import Any, Callable

from .functional import aliases, compound, math, rearrange, selection
from .tensor import Tensor
from .tensor_methods import _method, apply_inplace

_METHODS: dict[str, Callable] = {
    **{name: getattr(compound, name) for name in (
        "addmm", "addmv", "addr", "baddbmm", "addbmm", "addcmul", "addcdiv", "lerp", "clamp_min", "clamp_max",
        "log2", "log10", "expm1", "trunc", "fix", "frac", "sgn", "logaddexp", "xlogy", "logit", "nan_to_num",
        "count_nonzero", "nansum", "nanmean", "diff")},
    **{name: getattr(aliases, name) for name in (
        "divide", "true_divide", "multiply", "subtract", "greater", "greater_equal", "less", "less_equal",
        "not_equal", "negative", "absolute", "swapdims", "moveaxis", "ravel")},
    **{name: getattr(rearrange, name) for name in (
        "fliplr", "flipud", "rot90", "repeat_interleave", "unflatten", "tensor_split")},
    **{name: getattr(selection, name) for name in (
        "median", "kthvalue", "quantile", "msort", "nonzero", "argwhere", "masked_select", "bincount")},
    "outer": math.outer, "ger": math.outer,
}

_IN_PLACE = ("addmm", "addmv", "addr", "baddbmm", "addbmm", "addcmul", "addcdiv", "lerp", "clamp_min", "clamp_max",
             "log2", "log10", "expm1", "trunc", "fix", "frac", "sgn", "xlogy", "logit", "nan_to_num", "divide",
             "true_divide", "multiply", "subtract", "greater", "greater_equal", "less", "less_equal", "not_equal",
             "negative", "absolute")


def _in_place(name: str, fn: Callable) -> Callable:
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        others = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
        return apply_inplace(self, lambda old: fn(old, *args, **kwargs), *others)

    method.__name__ = name + "_"
    method.__doc__ = f"In-place `{name}`: the result is written into this tensor."
    return method


for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _method(_fn))
for _name in _IN_PLACE:
    setattr(Tensor, _name + "_", _in_place(_name, _METHODS[_name]))
Tensor.ndimension = lambda self: self.ndim
Tensor.nbytes = property(lambda self: int(self._data.nbytes), doc="The bytes the elements take.")
Tensor.itemsize = property(lambda self: int(self._data.itemsize), doc="The bytes one element takes.")
