"""`PendingArray`: the array of a tensor whose op was recorded (by ``kiln.djit``) but has not run.

A djit call records ops instead of running them (kiln/jit/lazy.py). The tensors it makes
hold a PendingArray as their data: it knows its shape and dtype (from the op's abstract
rule), so shape arithmetic and further recording need no values. Anything that needs
the values (NumPy conversion, an attribute other than shape/dtype/ndim/size/itemsize,
an operator, ``bool()``) *realizes* it: the recorder runs every pending op through a
compiled plan, and the PendingArray then stands for the real array (`value`). Code that
holds a tensor swaps the real array in where it can (`Tensor._concrete`), so the proxy
is only passed through where some code kept a reference to it.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..shaped import Shaped


class PendingArray(Shaped):
    """A not-yet-computed array of known `shape` and NumPy `dtype`; `realize()` computes it."""

    __slots__ = ("shape", "dtype", "value", "recorder", "index", "__weakref__")

    def __init__(self, shape: tuple, dtype: np.dtype, recorder: Any, index: int):
        self.shape = shape
        self.dtype = dtype
        self.value: np.ndarray | None = None
        self.recorder = recorder  # whose `realize()` fills `value`
        self.index = index  # the op's position in the recorder

    def realize(self) -> np.ndarray:
        """The real array (computed now, with every other pending op of its recorder, if it is not yet)."""
        if self.value is None:
            self.recorder.realize()
            if self.value is None:  # the recorder could not compute it: a bug, never a silent wrong value
                raise RuntimeError("kiln: a recorded (lazy) tensor could not be computed")
        return self.value

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        data = self.realize()
        if dtype is not None and np.dtype(dtype) != data.dtype:
            return data.astype(dtype)
        return data.copy() if copy else data

    def __getattr__(self, name: str) -> Any:  # any other ndarray attribute: computed, then the real one's
        if name.startswith("__") or name in PendingArray.__slots__:
            raise AttributeError(name)
        return getattr(self.realize(), name)

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        state = "pending" if self.value is None else "computed"
        return f"PendingArray({state}, shape={self.shape}, dtype={self.dtype})"


def _forward(name: str) -> Callable:
    def method(self: PendingArray, *args: Any) -> Any:
        return getattr(self.realize(), name)(*args)

    method.__name__ = name
    return method


# Python looks special methods up on the type, not through __getattr__: forward each to the real array.
for _name in ("__len__", "__iter__", "__getitem__", "__setitem__", "__bool__", "__float__", "__int__",
              "__index__", "__complex__", "__str__", "__format__", "__neg__", "__pos__", "__abs__", "__invert__",
              "__lt__", "__le__", "__eq__", "__ne__", "__gt__", "__ge__", "__contains__", "__copy__", "__deepcopy__", "__reduce__", "__reduce_ex__", "__dlpack__",
              *(f"__{op}__" for base in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
                                         "and", "or", "xor", "lshift", "rshift")
                for op in (base, "r" + base, "i" + base))):
    setattr(PendingArray, _name, _forward(_name))
