"""Argument checks shared by the functional ops: sizes that must be ints, indices in range.

Value checks (indices in range, class targets, integer divisors without zeros) are the
check primitives of kiln/ops/checks.py: the op uses the checked tensor they return, so a
compiled graph holds the check and every replay runs it, raising as eager does.
"""
from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np

from ..ops.checks import CheckDivisor, CheckIndex, CheckTargets
from ..ops.primitive import REGISTRY, bind
from ..trace_state import trace_state
from ..tensor import Literal, Tensor
from ..sizes import is_int

_CHECK_INDEX: CheckIndex = REGISTRY["check_index"]  # type: ignore[assignment]
_CHECK_TARGETS: CheckTargets = REGISTRY["check_targets"]  # type: ignore[assignment]
_CHECK_DIVISOR: CheckDivisor = REGISTRY["check_divisor"]  # type: ignore[assignment]


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
    if is_int(d):  # a SymInt (dynamic_dims) stays symbolic
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
        if is_int(value):
            return value
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{op}(): argument '{arg}' must be an int, got {type(value).__name__} ({value!r})")


def checked_index(op: str, index: Tensor, x: Tensor, dim: int | None, *, allow_negative: bool = False) -> Tensor:
    """`index` after checking that every value indexes dim `dim` of `x` (IndexError otherwise).

    Values must lie in ``[0, size)``, or ``[-size, size)`` with `allow_negative` (negative
    indices count from the end). ``dim=None`` means the rows of an embedding table `x`.
    Use the returned tensor as the index: while tracing it is the output of a
    `check_index` node, so every compiled replay repeats the check.
    """
    return _check(_CHECK_INDEX, index, {"op": op, "shape": tuple(x.shape), "dim": dim,
                                        "allow_negative": allow_negative})


def checked_targets(op: str, target: Tensor, n_classes: Any, ignore_index: int) -> Tensor:
    """`target` after checking that every value other than `ignore_index` is a class in
    ``[0, n_classes)`` (IndexError otherwise); use the result as the target (see `checked_index`)."""
    return _check(_CHECK_TARGETS, target, {"op": op, "n_classes": n_classes, "ignore_index": ignore_index})


def checked_classes(op: str, target: Tensor, n_classes: Any) -> Tensor:
    """`target` after checking that every value is a class in ``[0, n_classes)`` (IndexError
    otherwise); use the result as the target (see `checked_index`)."""
    return _check(_CHECK_INDEX, target, {"op": op, "shape": (n_classes,), "dim": 0, "allow_negative": False})


def checked_divisor(op: str, a: Tensor, b: Tensor) -> Tensor:
    """`b` after checking that it holds no zero when the operands are integers and `a` is not empty
    (IntegerDivisionByZeroError otherwise; floats divide to inf or nan). Use the result as the divisor.

    A baked literal divisor (``x // 2``) never changes, so it is checked here once and no
    node is recorded for it. Emptiness is static: a dynamic dim is never 0 in a plan.
    """
    if a._data.dtype.kind not in "iu" or not a._data.size:
        return b
    if type(b) is Literal:
        _CHECK_DIVISOR.kernel(b._device._xp or b._device.xp, b._data, op=op)
        return b
    return _check(_CHECK_DIVISOR, b, {"op": op})


def _check(prim: Any, t: Tensor, params: dict) -> Tensor:
    """Run a check primitive on `t`. Eager calls its kernel directly and hands `t` back (no new
    tensor, no autograd bookkeeping); while tracing it binds, so the graph holds the check."""
    if trace_state.tracer is None:
        prim.kernel(t._device._xp or t._device.xp, t._data, **params)
        return t
    return bind(prim, (t,), params)
