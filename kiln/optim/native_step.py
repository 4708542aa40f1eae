"""The eager optimizer step through native kernels: one call per dtype updates a whole group.

`native_update_group` collects, for every parameter of a group that has a gradient, the
addresses of its data, gradient and state arrays and its per-parameter scalars, and runs
the optimizer's `NativeRule` kernel once per dtype. Parameters it cannot hand to C (not a
C-contiguous float32/float64 NumPy array, a gradient of another dtype or shape, state
arrays laid out differently, a gradient overlapping the parameter) are returned, and the
optimizer updates them with its NumPy path; both paths give the same bits. So are the
parameters of a dtype whose kernel is still compiling in the background (`NativeRule.ready`).

An optimizer opts in by defining, next to its `_update_group`:

- ``_native_rule``: its `NativeRule`;
- ``_native_spec(group)``: the switch values and group scalars for this call, or None
  when the group's options need the NumPy path;
- ``_native_state(group, p)``: `p`'s state tensors in the rule's order, created if
  missing, and whether they were just created (``FIRST``);
- ``_native_param_scalars(group, p)``: `p`'s scalars, advancing its step counter if the
  optimizer keeps one (called once the parameter is sure to take the native path).

A subclass that overrides `_update_group` gets the NumPy path (its own update) instead.
"""
from __future__ import annotations

import ctypes
import weakref
from array import array
from typing import TYPE_CHECKING, Any

import numpy as np

from ..tensor import Tensor
from .native_kernel import C_TYPES

if TYPE_CHECKING:
    from .optimizer import Optimizer

_ADDRESSES: dict[int, tuple[weakref.ref, int, int]] = {}  # id(array) -> (ref, address, nbytes)
_NATIVE_TYPES: dict[type, bool] = {}
_char_at, _addressof = ctypes.c_char.from_buffer, ctypes.addressof


def address(a: np.ndarray) -> int:
    """The data address of `a`, remembered while `a` lives (reading it from NumPy costs ~1 us)."""
    key = id(a)
    hit = _ADDRESSES.get(key)
    if hit is not None and hit[0]() is a and hit[2] == a.nbytes:
        return hit[1]
    try:  # a writable buffer's address through ctypes: ~0.4 us, against ~1.5 us for __array_interface__
        ptr = _addressof(_char_at(a))
    except (TypeError, ValueError, BufferError):  # read-only, not contiguous, or empty
        ptr = a.__array_interface__["data"][0]
    _ADDRESSES[key] = (weakref.ref(a, lambda ref, key=key: _forget(key, ref)), ptr, a.nbytes)
    return ptr


def _forget(key: int, ref: weakref.ref) -> None:
    hit = _ADDRESSES.get(key)
    if hit is not None and hit[0] is ref:
        del _ADDRESSES[key]


def has_native_update(opt: Optimizer) -> bool:
    """Whether `opt`'s class updates through a `NativeRule` its `_update_group` agrees with.

    The class that defines ``_native_spec`` must also be the one (or a subclass of the one)
    that defines ``_update_group``: a subclass with its own update keeps it.
    """
    cls = type(opt)
    known = _NATIVE_TYPES.get(cls)
    if known is None:
        spec_owner = next((c for c in cls.__mro__ if "_native_spec" in c.__dict__), None)
        update_owner = next((c for c in cls.__mro__ if "_update_group" in c.__dict__), None)
        known = spec_owner is not None and update_owner is not None and issubclass(spec_owner, update_owner)
        _NATIVE_TYPES[cls] = known
    return known


class _Batch:
    """The table of one dtype's parameters for one kernel call."""

    __slots__ = ("addresses", "sizes", "scalars", "first", "written", "keep")

    def __init__(self) -> None:
        self.addresses = array("Q")
        self.sizes = array("q")
        self.scalars = array("d")
        self.first = array("B")
        self.written: list[Tensor] = []
        self.keep: list[np.ndarray] = []  # contiguous copies of gradients, alive until the call


def native_update_group(opt: Optimizer, group: dict[str, Any]) -> list[Tensor] | None:
    """Update `group` through `opt`'s native kernel; return the parameters left for the NumPy
    path (None: the whole group, as these options have no kernel)."""
    spec = opt._native_spec(group)
    if spec is None:
        return None
    switches, group_scalars = spec
    rule = opt._native_rule
    batches: dict[np.dtype, _Batch] = {}
    building: set[np.dtype] = set()  # dtypes whose kernel is still compiling (background builds)
    rest: list[Tensor] = []
    for p in dict.__getitem__(group, "params"):
        g = p.grad
        if g is None:
            continue
        data, grad = p._data, g._data
        if not _fits(data, grad):
            rest.append(p)
            continue
        dtype = data.dtype
        batch = batches.get(dtype)
        if batch is None:
            if dtype in building or not _kernel_ready(rule, switches, dtype):
                building.add(dtype)
                rest.append(p)  # NumPy this step, before its state is made here: the same bits
                continue
            batch = batches[dtype] = _Batch()
        if not grad.flags.c_contiguous:
            grad = np.ascontiguousarray(grad)
            batch.keep.append(grad)
        p_at, g_at = address(data), address(grad)
        nbytes = data.nbytes
        if nbytes and g_at < p_at + nbytes and p_at < g_at + nbytes:
            rest.append(p)  # the gradient overlaps the parameter: NumPy's passes give the answer
            continue
        tensors, first = opt._native_state(group, p)
        state_at = [address(t._data) for t in tensors if _same_layout(t, data)]
        if len(state_at) != len(tensors):
            rest.append(p)
            continue
        batch.addresses.append(p_at)
        batch.addresses.append(g_at)
        batch.addresses.extend(state_at)
        batch.sizes.append(data.size)
        batch.scalars.extend(opt._native_param_scalars(group, p))
        batch.first.append(1 if first else 0)
        batch.written.append(p)
        batch.written.extend(tensors)
    if batches:
        scalars = array("d", group_scalars)
        for dtype, batch in batches.items():
            if not batch.sizes:
                continue
            fn = rule.kernel(switches, dtype)
            fn(len(batch.sizes), _at(batch.sizes), _at(batch.addresses), _at(scalars), _at(batch.scalars),
               _at(batch.first))
            for t in batch.written:
                t._bump_version()
    return rest


def _kernel_ready(rule: Any, switches: tuple, dtype: np.dtype) -> bool:
    """Whether the kernel for `dtype` can run now: always where builds happen on the calling thread, else
    once NativeRule.ready (which starts its build in the background) says so."""
    from ..jit.backends.cpu import background  # noqa: PLC0415 - kiln.jit imports kiln.optim

    return not background.background_builds() or rule.ready(switches, dtype)


def _at(table: array) -> int:
    """The address of a table's items (0 for an empty table, which the kernel does not read)."""
    return table.buffer_info()[0] if table else 0


def _fits(data: Any, grad: Any) -> bool:
    """Whether a parameter and its gradient can go to a kernel (the gradient may be strided)."""
    return (type(data) is np.ndarray and type(grad) is np.ndarray and data.dtype in C_TYPES
            and grad.dtype == data.dtype and data.flags.c_contiguous and data.flags.writeable
            and grad.shape == data.shape)


def _same_layout(t: Any, data: np.ndarray) -> bool:
    """Whether state tensor `t` is a writeable C-contiguous array of `data`'s dtype and shape."""
    arr = getattr(t, "_data", None)
    return (type(arr) is np.ndarray and arr.dtype == data.dtype and arr.shape == data.shape
            and arr.flags.c_contiguous and arr.flags.writeable)
