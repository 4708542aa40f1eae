"""PyTorch's dtype queries: `finfo`, `iinfo`, `promote_types`, `result_type`, `can_cast`, `is_floating_point`,
`is_complex`, `is_nonzero`.

>>> kiln.finfo(kiln.float32).eps, kiln.iinfo(kiln.int32).max
>>> kiln.promote_types(kiln.int64, kiln.float32)        # kiln.float32, as in PyTorch
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .dtypes import DType, default_float, get_dtype, promote, promote_with_scalar, scalar_dtype
from .tensor import Tensor

_CATEGORY = {"b": 0, "i": 1, "u": 1, "f": 2}  # bool < integral < floating, PyTorch's casting order


class finfo:  # noqa: N801 - PyTorch's name
    """The machine limits of a floating dtype (the default float without one): ``bits``, ``eps``, ``max``,
    ``min``, ``tiny`` (= ``smallest_normal``), ``resolution`` and ``dtype`` (its name)."""

    def __init__(self, type: Any = None) -> None:  # noqa: A002 - PyTorch's parameter name
        dt = default_float if type is None else get_dtype(type)
        if dt.kind != "f":
            raise TypeError(f"finfo: expected a floating point dtype, got {dt.name}; use kiln.iinfo for integers")
        if dt.name == "bfloat16":
            import ml_dtypes  # noqa: PLC0415 - the optional package kiln.bfloat16 comes from

            info: Any = ml_dtypes.finfo(dt.np)
        else:
            info = np.finfo(dt.np)
        self.bits = int(info.bits)
        self.eps, self.max, self.min = float(info.eps), float(info.max), float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 10.0 ** -int(info.precision)  # (a decimal power, as PyTorch reports it)
        self.dtype = dt.name

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution}, min={self.min}, max={self.max}, eps={self.eps}, "
                f"smallest_normal={self.smallest_normal}, tiny={self.tiny}, dtype={self.dtype})")


class iinfo:  # noqa: N801 - PyTorch's name
    """The limits of an integer (or bool) dtype: ``bits``, ``max``, ``min`` and ``dtype`` (its name)."""

    def __init__(self, type: Any) -> None:  # noqa: A002
        dt = get_dtype(type)
        if dt.kind not in "biu":
            raise TypeError(f"iinfo: expected an integer dtype, got {dt.name}; use kiln.finfo for floating point")
        if dt.kind == "b":
            self.bits, self.min, self.max = 8, 0, 1
        else:
            info = np.iinfo(dt.np)
            self.bits, self.min, self.max = int(info.bits), int(info.min), int(info.max)
        self.dtype = dt.name

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


def promote_types(type1: Any, type2: Any) -> DType:
    """The dtype two tensors of these dtypes combine into."""
    return promote(get_dtype(type1), get_dtype(type2))


def result_type(tensor1: Any, tensor2: Any) -> DType:
    """The dtype an arithmetic op on these operands (tensors or Python numbers) gives; a number takes the
    tensor's dtype unless it is of a higher kind."""
    a, b = isinstance(tensor1, Tensor), isinstance(tensor2, Tensor)
    if a and b:
        return promote(tensor1.dtype, tensor2.dtype)
    if a or b:
        t, value = (tensor1, tensor2) if a else (tensor2, tensor1)
        return promote_with_scalar(t.dtype, value)
    return promote(scalar_dtype(tensor1), scalar_dtype(tensor2))


def can_cast(from_: Any, to: Any) -> bool:
    """Whether PyTorch's casting rules allow `from_` to `to`: never to a lower kind (float to an integer,
    an integer to bool)."""
    src, dst = get_dtype(from_), get_dtype(to)
    return _CATEGORY[dst.kind] >= _CATEGORY[src.kind]


def is_floating_point(input: Tensor) -> bool:  # noqa: A002
    return _tensor(input, "is_floating_point").dtype.kind == "f"


def is_complex(input: Tensor) -> bool:  # noqa: A002
    """False: kiln has no complex dtypes."""
    _tensor(input, "is_complex")
    return False


def is_nonzero(input: Tensor) -> bool:  # noqa: A002
    """Whether a one-element tensor is not zero; more (or fewer) elements raise, as in PyTorch."""
    t = _tensor(input, "is_nonzero")
    if t.numel() != 1:
        raise RuntimeError(f"is_nonzero: a tensor with {t.numel()} elements is ambiguous; it needs exactly one")
    return bool(t.item() != 0)


def _tensor(x: Any, op: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): expected a kiln.Tensor, got {type(x).__name__}")
    return x


def _signed(self: Tensor) -> bool:
    return self.dtype.kind in "if"


Tensor.is_complex = lambda self: False
Tensor.is_signed = _signed
Tensor.is_nonzero = is_nonzero
Tensor.is_same_size = lambda self, other: tuple(self.shape) == tuple(other.shape)
