"""Data types: kiln's dtype objects, parsing, and NumPy-like type promotion."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .sizes import is_symbolic_number


class DType:
    """A tensor element type, e.g. ``kiln.float32``. Compares equal to itself only."""

    __slots__ = ("name", "np", "itemsize", "is_floating_point", "kind", "rank", "c_type")

    def __init__(self, name: str, np_dtype: Any, kind: str, rank: int, c_type: str):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.kind = kind  # "b" bool, "i" integer, "f" floating
        self.is_floating_point = kind == "f"
        self.rank = rank  # order within the kind, for promotion
        self.c_type = c_type

    def __repr__(self) -> str:
        return f"kiln.{self.name}"

    def __reduce__(self):
        return (get_dtype, (self.name,))


bool_ = DType("bool", np.bool_, "b", 0, "unsigned char")
int32 = DType("int32", np.int32, "i", 0, "int32_t")
int64 = DType("int64", np.int64, "i", 1, "int64_t")
float16 = DType("float16", np.float16, "f", 0, "_Float16")
float32 = DType("float32", np.float32, "f", 1, "float")
float64 = DType("float64", np.float64, "f", 2, "double")

try:  # bfloat16 arrays come from ml_dtypes, an optional dependency: pip install 'kiln[bfloat16]'
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - exercised in a subprocess by tests/core/test_core_bfloat16.py
    _ml_dtypes = None

BFLOAT16_MISSING = ("kiln.bfloat16 needs the ml_dtypes package, which is not installed; install it with "
                    "pip install 'kiln[bfloat16]' (or pip install ml_dtypes)")


class UnavailableDType:
    """Stands in for a dtype whose optional package is missing: using it raises TypeError with the fix."""

    def __init__(self, name: str, why: str):
        self.name, self.why = name, why

    def __repr__(self) -> str:
        return f"kiln.{self.name} (unavailable: {self.why})"


if _ml_dtypes is not None:
    # 8 exponent bits like float32, 8 significant bits; NumPy ops on it compute in float32 and round
    bfloat16: Any = DType("bfloat16", _ml_dtypes.bfloat16, "f", 0, "uint16_t")
    ALL_DTYPES = (bool_, int32, int64, float16, bfloat16, float32, float64)
else:
    bfloat16 = UnavailableDType("bfloat16", BFLOAT16_MISSING)
    ALL_DTYPES = (bool_, int32, int64, float16, float32, float64)
_KIND_ORDER = {"b": 0, "i": 1, "f": 2}

_BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES}
_BY_NAME.update({
    "float": float32, "double": float64, "half": float16, "long": int64, "int": int32,
    "f32": float32, "f64": float64, "f16": float16, "i32": int32, "i64": int64,
})
if isinstance(bfloat16, DType):
    _BY_NAME["bf16"] = bfloat16
_BY_NP: dict[np.dtype, DType] = {d.np: d for d in ALL_DTYPES}

default_float: DType = float32


def get_dtype(spec: Any) -> DType:
    """Parse a dtype given as a DType, a name ("float32"), a NumPy dtype or a torch dtype."""
    if isinstance(spec, DType):
        return spec
    if isinstance(spec, str):
        found = _BY_NAME.get(spec)
        if found is not None:
            return found
    elif spec is bool:
        return bool_
    elif spec is int:
        return int64
    elif spec is float:
        return default_float
    else:
        text = str(spec)
        if text.startswith("torch."):
            found = _BY_NAME.get(text[6:])
            if found is not None:
                return found
        try:
            found = _BY_NP.get(np.dtype(spec))
        except TypeError:
            found = None
        if found is not None:
            return found
    if isinstance(spec, UnavailableDType):
        raise TypeError(spec.why)
    if not isinstance(bfloat16, DType) and str(spec).replace("torch.", "") in ("bfloat16", "bf16"):
        raise TypeError(BFLOAT16_MISSING)
    names = ", ".join(d.name for d in ALL_DTYPES)
    raise TypeError(f"unknown dtype {spec!r}: expected one of {names} (or a kiln.dtype object)")


def from_numpy_dtype(np_dtype: np.dtype) -> DType:
    """The kiln dtype of a NumPy dtype; unsupported types raise TypeError naming the fix.

    Byte order does not matter (a big-endian float64 is float64); integers kiln lacks map to
    int64 and floats wider than float64 to float64 (`lossless_array` checks their values).
    """
    found = _BY_NP.get(np_dtype)
    if found is not None:
        return found
    if not np_dtype.isnative:
        found = _BY_NP.get(np_dtype.newbyteorder("="))
        if found is not None:
            return found
    if np_dtype.kind == "f":
        return float64 if np_dtype.itemsize > 8 else default_float
    if np_dtype.kind in "iu":
        return int64
    raise TypeError(
        f"unsupported array dtype {np_dtype}: kiln supports "
        f"{', '.join(d.name for d in ALL_DTYPES)}; convert with .astype() first"
    )


def lossless_array(arr: np.ndarray, op: str) -> np.ndarray:
    """`arr` with a dtype kiln has, in native byte order, holding the same values; `arr` itself if it has one.

    Non-native byte order is swapped and the dtype kept (big-endian float64 stays float64).
    Integers kiln lacks widen to int64; a uint64 value above int64's range raises
    DTypeOverflowError, and a longdouble value float64 cannot hold exactly raises TypeError.
    """
    kind = from_numpy_dtype(arr.dtype)
    if arr.dtype == kind.np:
        return arr
    if arr.dtype.kind == "u" and arr.size and arr.dtype.itemsize == 8:
        top = int(arr.max())
        if top > np.iinfo(np.int64).max:
            raise DTypeOverflowError(
                f"{op}(): got uint64 value {top}, which int64 (kiln's widest integer dtype; kiln has no uint64) "
                "cannot hold: it would wrap to a negative number. Fix: convert it first, e.g. "
                "arr.astype(np.float64) (exact up to 2**53), or arr.view(np.int64) to keep the bits")
    with np.errstate(over="ignore"):
        converted = arr.astype(kind.np)
    if arr.dtype.kind == "f" and arr.dtype.itemsize > kind.itemsize:
        lost = ~((converted == arr) | (np.isnan(converted) & np.isnan(arr)))
        if lost.any():
            raise TypeError(
                f"{op}(): got {arr.dtype} value {arr[lost].flat[0]!r}, which float64 (kiln's widest float dtype) "
                f"cannot hold exactly: it would become {converted[lost].flat[0]!r}. Fix: convert it first to "
                "accept the rounding, e.g. arr.astype(np.float64)")
    return converted


class DTypeOverflowError(OverflowError, RuntimeError):
    """A value does not fit the integer dtype asked for (``kiln.tensor(2**31, dtype=kiln.int32)``).

    PyTorch raises RuntimeError ("value cannot be converted to type int32 without overflow"),
    Python and NumPy OverflowError: this is both, so either ``except`` clause catches it.
    """


class DTypeMismatchError(TypeError, RuntimeError):
    """Operands that must share a dtype don't (a float64 input to a float32 ``nn.Linear``).

    PyTorch raises RuntimeError ("mat1 and mat2 must have the same dtype"); this is also a
    TypeError, so either ``except`` clause catches it.
    """


def check_fits(value: Any, dtype: DType, op: str) -> None:
    """Raise DTypeOverflowError if a Python or NumPy scalar cannot be stored in integer `dtype`.

    Floats must be finite and lie within the range (they are truncated toward zero); symbolic
    sizes, tensors and other objects are left to the conversion itself.
    """
    kind = value.__class__
    if kind is bool or kind is np.bool_ or dtype.kind != "i":
        return
    if kind is int or kind is float or isinstance(value, (np.integer, np.floating)):
        info = np.iinfo(dtype.np)
        number = value.item() if isinstance(value, np.generic) else value
        if not info.min <= number <= info.max:  # False for NaN too; exact for ints and floats
            raise overflow_error(op, number, dtype)


def check_array_fits(arr: np.ndarray, dtype: DType, op: str) -> None:
    """`check_fits` for every element of `arr` (integer or float data bound for integer `dtype`)."""
    if dtype.kind != "i" or arr.size == 0 or arr.dtype.kind not in "iuf":
        return
    if arr.dtype.kind != "f" and np.can_cast(arr.dtype, dtype.np, "safe"):
        return
    lo, hi = arr.min().item(), arr.max().item()
    if lo != lo or hi != hi:  # NaN
        raise overflow_error(op, float("nan"), dtype)
    info = np.iinfo(dtype.np)
    if lo < info.min:
        raise overflow_error(op, lo, dtype)
    if hi > info.max:
        raise overflow_error(op, hi, dtype)


def overflow_error(op: str, value: Any, dtype: DType) -> DTypeOverflowError:
    """The error for `value` that does not fit integer `dtype`: the value, the range and the fix."""
    info = np.iinfo(dtype.np)
    if isinstance(value, float) and not math.isfinite(value):
        return DTypeOverflowError(f"{op}(): value {value!r} cannot be converted to {dtype.name}: NaN and "
                                  "infinity have no integer value. Fix: use a float dtype, or replace them first")
    wider = "float64" if dtype is int64 else "int64 (or float64)"
    return DTypeOverflowError(
        f"{op}(): value {value!r} cannot be converted to {dtype.name} without overflow: {dtype.name} "
        f"holds whole numbers in [{info.min}, {info.max}]. Fix: pick a dtype that holds it, e.g. {wider}"
    )


def promote(a: DType, b: DType) -> DType:
    """Result type of a binary op: the higher kind wins (bool < int < float), then the wider type.

    Mixing an integer tensor with a float tensor gives the float tensor's type, as in PyTorch
    and JAX (NumPy would widen int64 + float32 to float64).
    """
    if a is b:
        return a
    ka, kb = _KIND_ORDER[a.kind], _KIND_ORDER[b.kind]
    if ka != kb:
        return a if ka > kb else b
    if a.rank == b.rank and a.kind == "f":  # float16 with bfloat16: neither holds the other (as PyTorch)
        return float32
    return a if a.rank >= b.rank else b


def scalar_dtype(value: Any) -> DType:
    """The dtype a Python scalar gets on its own."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)) or (is_symbolic_number(value) and value.integral):
        return int64
    return default_float


def promote_with_scalar(t: DType, value: Any) -> DType:
    """A Python scalar is weakly typed: it takes the tensor's type unless it is of a higher kind."""
    s = scalar_dtype(value)
    if _KIND_ORDER[s.kind] <= _KIND_ORDER[t.kind]:
        return t
    return s
