"""Legacy typed constructors: ``kiln.FloatTensor(2, 3)``, ``kiln.LongTensor([1, 2])``, ``kiln.Tensor(2, 3)``.

Older PyTorch code builds tensors through these names. Each class takes sizes (a
zero-filled tensor: kiln never hands out uninitialized memory) or one sequence of
data, and ``isinstance(t, kiln.FloatTensor)`` asks whether `t` is a float32 CPU tensor.

>>> kiln.FloatTensor(2, 3).shape
(2, 3)
>>> isinstance(kiln.LongTensor([1, 2]), kiln.LongTensor)
True
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import late_bound
from .device import get_device
from .dtypes import DType, bfloat16, bool_, default_float, float16, float32, float64, get_dtype, int32, int64

if TYPE_CHECKING:
    from .tensor import Tensor


def _is_size(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def legacy_new(args: tuple, dtype: DType | None, device: Any, name: str) -> Tensor:
    """The tensor a legacy constructor called `name` builds from `args`.

    No args: an empty 1-D tensor. Ints: a zero-filled tensor of that shape. One tensor: that
    tensor's memory (it must already have `dtype`). One sequence or array: its values as
    `dtype`. `dtype` None (``kiln.Tensor``) means the default float for Python data, while a
    tensor or a NumPy array keeps its dtype (PyTorch would round a float64 array to float32).
    """
    functional = late_bound.functional()
    if all(_is_size(a) for a in args):  # no args: an empty 1-D tensor
        return functional.zeros(*(args or (0,)), dtype=dtype or default_float, device=device)
    if len(args) > 1:
        kinds = ", ".join(type(a).__name__ for a in args)
        raise TypeError(f"{name}() expects sizes (ints, e.g. {name}(2, 3)) or one sequence of data (e.g. "
                        f"{name}([1, 2])), got ({kinds}); for a tensor with a dtype use kiln.tensor(data, dtype=...)")
    data = args[0]
    if isinstance(data, late_bound.Tensor):
        if dtype is not None and data.dtype != dtype:
            raise TypeError(f"{name}(tensor) expects a tensor of dtype {dtype.name}, got {data.dtype.name}; convert it "
                            f"first with tensor.to(kiln.{dtype.name})")
        if device is not None and data.device != device:
            raise TypeError(f"{name}(tensor) expects a tensor on {device}, got one on {data.device}; move it first "
                            f"with tensor.to({str(device)!r})")
        return data.detach()  # shares its memory, as PyTorch does
    if isinstance(data, (int, float, complex, bool, np.generic)):
        raise TypeError(f"{name}(data): data must be a sequence, got {type(data).__name__} ({data!r}); for a 0-d "
                        f"tensor use kiln.tensor({data!r}), for a 1-D one {name}([{data!r}])")
    if dtype is None and isinstance(data, np.ndarray):  # kiln.Tensor(array) keeps every value: the array's dtype
        return late_bound.tensor(data, device=device)
    return late_bound.tensor(data, dtype=dtype or default_float, device=device)


class _LegacyTensorType(type):
    """The type of the legacy classes: calling one builds a Tensor, isinstance checks dtype and device."""

    dtype: Any

    def __call__(cls, *args: Any, device: Any = None) -> Tensor:  # type: ignore[override]
        return legacy_new(args, get_dtype(cls.dtype), get_device(device) if device is not None else None,
                          f"kiln.{cls.__name__}")

    def __instancecheck__(cls, obj: Any) -> bool:
        return (isinstance(obj, late_bound.Tensor) and isinstance(cls.dtype, DType) and obj._data.dtype == cls.dtype.np
                and obj._device.type == "cpu")

    def __repr__(cls) -> str:
        return f"<class 'kiln.{cls.__name__}'>"


def _legacy_class(name: str, dtype: Any) -> Any:
    doc = (f"Legacy constructor of {getattr(dtype, 'name', dtype)} CPU tensors: ``kiln.{name}(2, 3)`` (zeros) or "
           f"``kiln.{name}([1, 2])``; ``isinstance(t, kiln.{name})`` checks dtype and device.")
    return _LegacyTensorType(name, (), {"dtype": dtype, "is_cuda": False, "__doc__": doc, "__module__": "kiln"})


FloatTensor = _legacy_class("FloatTensor", float32)
DoubleTensor = _legacy_class("DoubleTensor", float64)
HalfTensor = _legacy_class("HalfTensor", float16)
BFloat16Tensor = _legacy_class("BFloat16Tensor", bfloat16)
LongTensor = _legacy_class("LongTensor", int64)
IntTensor = _legacy_class("IntTensor", int32)
BoolTensor = _legacy_class("BoolTensor", bool_)

LEGACY_CLASSES = {cls.__name__: cls for cls in (FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor, LongTensor,
                                                 IntTensor, BoolTensor)}


def legacy_dtype(spec: Any) -> DType | None:
    """The dtype a legacy class, or its name (``"torch.LongTensor"``, ``"kiln.LongTensor"``), stands for; else None."""
    if isinstance(spec, _LegacyTensorType):
        return get_dtype(spec.dtype)
    if isinstance(spec, str) and spec.startswith(("torch.", "kiln.")):
        cls = LEGACY_CLASSES.get(spec.partition(".")[2])
        if cls is not None:
            return get_dtype(cls.dtype)
    return None
