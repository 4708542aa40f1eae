"""Argument checks shared by the functional ops: sizes that must be ints, indices in range.

Index checks read the index tensor's real data (one min and one max), never through the
tracer: under kiln.jit they run once, on the values seen at trace time, and compiled
replays do not repeat them.
"""
from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np

from ..tensor import Tensor


def size_tuple(op: str, shape: Sequence[Any], arg: str = "size") -> tuple:
    """`shape` (``(2, 3)``, ``((2, 3),)`` or ``([2, 3],)``) as a tuple of ints.

    Accepts Python ints, NumPy integers, 0-d integer tensors and symbolic sizes (SymInts,
    kept as they are); anything else, floats and bools included, raises TypeError naming
    the op, the position and the type found, as PyTorch does.
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    out = []
    for pos, d in enumerate(shape):
        out.append(d if d.__class__ is int else _size_element(op, arg, pos, d))
    return tuple(out)


def _size_element(op: str, arg: str, pos: int, d: Any) -> int:
    if isinstance(d, (bool, np.bool_)):
        raise TypeError(f"{op}(): argument '{arg}' must be a tuple of ints, but found element of type "
                        f"bool at pos {pos} ({d!r}); pass the size as an int, e.g. {int(d)}")
    if isinstance(d, int):  # an int subclass: a SymInt (dynamic_dims) stays symbolic
        return d
    try:
        return operator.index(d)  # NumPy integers, 0-d integer tensors
    except TypeError:
        pass
    hint = f"int({d!r}) or // for a computed size" if isinstance(d, (float, np.floating)) else "an int"
    raise TypeError(f"{op}(): argument '{arg}' must be a tuple of ints, but found element of type "
                    f"{type(d).__name__} at pos {pos} ({d!r}); sizes must be whole numbers: use {hint}")


def int_arg(op: str, arg: str, value: Any) -> int:
    """A scalar argument that must be an int (``eye(n)``, ``randperm(n)``, ``linspace(steps=)``)."""
    if value.__class__ is int:
        return value
    if not isinstance(value, (bool, np.bool_)):
        if isinstance(value, int):
            return value
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{op}(): argument '{arg}' must be an int, got {type(value).__name__} ({value!r})")


def check_index_range(op: str, index: Tensor, size: int, what: str, *, allow_negative: bool = False) -> None:
    """Raise IndexError unless every value of `index` lies in ``[0, size)``.

    With `allow_negative`, ``[-size, size)`` (negative indices count from the end). `what`
    names the indexed dimension in the message, e.g. "dimension 1 with size 3".
    """
    data = index._data
    if data.size == 0:
        return
    lo, hi = int(data.min()), int(data.max())
    low = -size if allow_negative else 0
    if lo >= low and hi < size:
        return
    bad = lo if lo < low else hi
    valid = f"{low} to {size - 1}" if size else "none: the dimension is empty"
    note = "" if allow_negative or bad >= 0 else " (negative indices are not allowed here)"
    raise IndexError(f"{op}: index {bad} is out of range for {what}; valid indices: {valid}{note}")


def check_class_targets(op: str, target: Tensor, n_classes: int, ignore_index: int) -> None:
    """Raise IndexError unless every target other than `ignore_index` is a class in ``[0, n_classes)``."""
    data = target._data
    if data.size == 0:
        return
    if int(data.min()) >= 0 and int(data.max()) < n_classes:
        return
    bad = data[(data != ignore_index) & ((data < 0) | (data >= n_classes))]
    if bad.size:
        raise IndexError(f"{op}: target {int(bad.reshape(-1)[0])} is out of bounds: class indices must lie "
                         f"in [0, {n_classes - 1}] for an input with {n_classes} classes, or equal "
                         f"ignore_index={ignore_index} to be skipped")
