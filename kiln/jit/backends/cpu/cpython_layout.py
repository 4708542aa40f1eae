"""Where CPython keeps a tuple's items and NumPy an array's data, so generated C reads them directly.

A plan's native segment takes its arrays as one tuple and checks and unpacks them in C:
asking NumPy for each data pointer from Python (``a.ctypes.data``) costs about a
microsecond per array, more than the rest of a small call. The C side reads
``PyTupleObject.ob_item`` and the fields of NumPy's ``PyArrayObject`` (data, nd,
dimensions, descr, flags: NumPy's documented struct, laid out the same since NumPy 1.7
and in NumPy 2) at byte offsets that this module finds and verifies once per process by
reading real objects through ctypes. When anything does not match (another Python
implementation, a free-threaded build with a different object header), `object_layout`
returns None with the reason, and the backend keeps its Python replay.
"""
from __future__ import annotations

import ctypes
import sys
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

C_CONTIGUOUS, ALIGNED, WRITEABLE = 0x0001, 0x0100, 0x0400  # NumPy's NPY_ARRAY_* flag bits

_lock = threading.Lock()
_probed: list = []  # [(ObjectLayout | None, reason)]


@dataclass(frozen=True)
class ObjectLayout:
    """Byte offsets of the fields generated code reads (see the module docstring)."""

    ob_type: int
    tuple_items: int
    array_data: int
    array_nd: int
    array_dims: int
    array_strides: int
    array_descr: int
    array_flags: int

    def defines(self) -> str:
        """The offsets as C macros."""
        return "\n".join(f"#define KILN_OFF_{name.upper()} {value}" for name, value in vars(self).items()) + "\n"


def _ptr(address: int) -> int:
    return ctypes.c_void_p.from_address(address).value or 0


def _int(address: int) -> int:
    return ctypes.c_int.from_address(address).value


def _guess() -> ObjectLayout:
    head = object.__basicsize__  # PyObject_HEAD; ob_type is its last field
    return ObjectLayout(ob_type=head - ctypes.sizeof(ctypes.c_void_p), tuple_items=tuple.__basicsize__,
                        array_data=head, array_nd=head + 8, array_dims=head + 16, array_strides=head + 24,
                        array_descr=head + 40,
                        array_flags=head + 48)


def _verify(layout: ObjectLayout) -> str | None:
    """Why `layout` does not describe this process's objects, or None when it does."""
    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name} is not CPython"
    if ctypes.sizeof(ctypes.c_void_p) != 8 or np.dtype(np.intp).itemsize != 8:
        return "not a 64-bit build"
    if tuple.__itemsize__ != ctypes.sizeof(ctypes.c_void_p):
        return "unexpected tuple item size"
    base = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    frozen = np.arange(4.0)
    frozen.flags.writeable = False
    samples = [base, base[1:, ::2], base.T, np.zeros((), np.float32), np.ones((0, 3), bool),
               np.empty(7, np.int64), np.asfortranarray(base[0]), frozen]
    items = tuple(samples)
    for k, a in enumerate(samples):
        if _ptr(id(items) + layout.tuple_items + 8 * k) != id(a):
            return "tuple items are not where expected"
        if _ptr(id(a) + layout.ob_type) != id(np.ndarray):
            return "ob_type is not where expected"
        if _ptr(id(a) + layout.array_data) != a.ctypes.data:
            return "the array data pointer is not where expected"
        if _int(id(a) + layout.array_nd) != a.ndim:
            return "the array rank is not where expected"
        dims = _ptr(id(a) + layout.array_dims)
        if a.ndim and tuple(ctypes.c_longlong.from_address(dims + 8 * i).value for i in range(a.ndim)) != a.shape:
            return "the array dimensions are not where expected"
        strides = _ptr(id(a) + layout.array_strides)
        if a.ndim and tuple(ctypes.c_longlong.from_address(strides + 8 * i).value
                            for i in range(a.ndim)) != a.strides:
            return "the array strides are not where expected"
        if _ptr(id(a) + layout.array_descr) != id(a.dtype):
            return "the array descr is not where expected"
        flags = _int(id(a) + layout.array_flags)
        if bool(flags & C_CONTIGUOUS) != a.flags.c_contiguous or bool(flags & ALIGNED) != a.flags.aligned or \
                bool(flags & WRITEABLE) != a.flags.writeable:
            return "the array flags are not where expected"
    return None


def object_layout() -> ObjectLayout | None:
    """The verified offsets for this process, or None (see `layout_problem`)."""
    return _probe()[0]


def address_reader() -> Callable[[np.ndarray], int]:
    """A function giving an ndarray's data address. Where the layout is verified it reads the array's
    data field at its offset, about 0.25 us against about 1.9 for ``a.ctypes.data`` (Zen 4), which is
    what it falls back to elsewhere. Only for exact ndarrays the caller holds while it uses the address."""
    layout = object_layout()
    if layout is None:
        return _numpy_address
    read, offset = ctypes.c_void_p.from_address, layout.array_data

    def address(a: np.ndarray) -> int:
        return read(id(a) + offset).value or 0
    return address


def _numpy_address(a: np.ndarray) -> int:
    return a.ctypes.data


def layout_problem() -> str | None:
    """Why generated code cannot read Python objects here, or None when it can."""
    return _probe()[1]


def _probe() -> tuple:
    with _lock:
        if not _probed:
            layout = _guess()
            try:
                problem = _verify(layout)
            except (ValueError, OSError) as exc:  # an unreadable address: the guess is wrong
                problem = f"probing objects failed ({exc})"
            _probed.append((None, problem) if problem else (layout, None))
        return _probed[0]


DESCR_DTYPES = ("float32", "float64", "bool", "int64")  # kiln_descr[] order


def descr_table() -> list[int]:
    """Addresses of NumPy's ndarray type and of the dtype objects in DESCR_DTYPES order."""
    return [id(np.ndarray)] + [id(np.dtype(name)) for name in DESCR_DTYPES]
