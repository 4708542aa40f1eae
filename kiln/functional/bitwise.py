"""Bitwise ops on integer and bool tensors (``&``, ``|``, ``^``, ``~``) and ``kiln.equal``.

Operands promote as arithmetic does (``bool_tensor & 1`` is int64). On two bool tensors
the ops are the logical ones (and, or, xor is ``!=``, not), which the compiler fuses;
integers go to the bitwise primitives (kiln/ops/bitwise.py). Float operands raise
TypeError, as PyTorch refuses them.

>>> kiln.tensor([12, 10]) & kiln.tensor([10, 6])
tensor([8, 2])
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..ops.primitive import REGISTRY, bind, bind_binary
from ..sizes import is_int
from ..tensor import Tensor
from .math import _as_tensor, _operands, all as all_, eq, logical_and, logical_not, logical_or, ne

_LOGICAL = {"bitwise_and": logical_and, "bitwise_or": logical_or, "bitwise_xor": ne}
_SYMBOLS = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "bitwise_not": "~"}


def _integral(op: str, *operands: Any) -> None:
    """Raise TypeError naming the operands that are not integer or bool tensors (or Python ints and bools)."""
    bad = []
    for o in operands:
        if isinstance(o, Tensor):
            if o._data.dtype.kind not in "biu":
                bad.append(o.dtype.name)
        elif not (is_int(o) or isinstance(o, (bool, np.integer, np.bool_))):
            bad.append(f"a Python {type(o).__name__}")
    if bad:
        raise TypeError(f"{op} (`{_SYMBOLS[op]}`) needs integer or bool tensors, got {' and '.join(bad)}; cast "
                        "first (x.long() or x.bool()), or for truth values use kiln.logical_and/logical_or/"
                        "logical_not, or compare first, e.g. (a > 0) & (b > 0)")


def _bitwise(op: str, input: Any, other: Any) -> Tensor:  # noqa: A002
    input, other = (_as_tensor(o) if isinstance(o, (list, tuple, np.ndarray)) else o for o in (input, other))
    _integral(op, input, other)
    a, b = _operands(input, other)
    if a._data.dtype.kind == "b":
        return _LOGICAL[op](a, b)
    return bind_binary(REGISTRY[op], a, b)


def bitwise_and(input: Any, other: Any) -> Tensor:  # noqa: A002 - PyTorch's argument name
    """The bitwise AND of integer or bool tensors (``a & b``); on bools, the logical and.

    >>> kiln.bitwise_and(kiln.tensor([12, 10]), 6)   # tensor([4, 2])
    """
    return _bitwise("bitwise_and", input, other)


def bitwise_or(input: Any, other: Any) -> Tensor:  # noqa: A002
    """The bitwise OR of integer or bool tensors (``a | b``); on bools, the logical or.

    >>> kiln.bitwise_or(kiln.tensor([12, 10]), 1)    # tensor([13, 11])
    """
    return _bitwise("bitwise_or", input, other)


def bitwise_xor(input: Any, other: Any) -> Tensor:  # noqa: A002
    """The bitwise XOR of integer or bool tensors (``a ^ b``); on bools, ``a != b``.

    >>> kiln.bitwise_xor(kiln.tensor([True, False]), kiln.tensor([True, True]))   # tensor([False, True])
    """
    return _bitwise("bitwise_xor", input, other)


def bitwise_not(input: Any) -> Tensor:  # noqa: A002
    """The bitwise NOT of an integer or bool tensor (``~x``): ``-x - 1`` for integers, not for bools.

    >>> kiln.bitwise_not(kiln.tensor([0, 5]))   # tensor([-1, -6])
    """
    x = _as_tensor(input)
    _integral("bitwise_not", x)
    if x._data.dtype.kind == "b":
        return logical_not(x)
    return bind(REGISTRY["bitwise_not"], (x,), {})


def equal(input: Tensor, other: Tensor) -> bool:  # noqa: A002
    """True when both tensors have the same shape and equal values (NaN is unequal), as a Python bool.

    Dtypes promote first, so ``equal(kiln.ones(2), kiln.ones(2, dtype=kiln.int64))`` is True.
    Reading the answer needs the values: inside ``kiln.compile`` it is a graph break.

    >>> kiln.equal(kiln.tensor([1, 2]), kiln.tensor([1, 2]))
    True
    """
    for pos, (name, t) in enumerate((("input", input), ("other", other)), 1):
        if not isinstance(t, Tensor):
            raise TypeError(f"equal(): argument '{name}' (position {pos}) must be a kiln.Tensor, got "
                            f"{type(t).__name__}; wrap it with kiln.tensor(...)")
    if tuple(input.shape) != tuple(other.shape):
        return False
    return bool(all_(eq(input, other))._concrete("kiln.equal"))  # a value read: a graph break when traced


__all__ = ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "equal"]
