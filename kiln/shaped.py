"""`Shaped`: the metadata an array stand-in derives from its shape and dtype, for objects that carry no elements
(a djit op's `PendingArray`, kiln/ops/pending.py; an autograd node's `ShapeOnly`, kiln/unread_inputs.py; a
backward traced from shapes alone's `Unevaluated`, kiln/jit/abstract_backward.py)."""
from __future__ import annotations

import math
from typing import Any

from .sizes import is_symbolic_number


def c_strides(shape: tuple) -> tuple:
    """C-order strides in elements, as NumPy gives a fresh array (size-1 dims included). A symbolic size (a
    plan for every size) multiplies as it is: where it is 0 there is no element to stride over."""
    strides = []
    step = 1
    for d in reversed(shape):
        strides.append(step)
        step *= d if is_symbolic_number(d) else max(int(d), 1)
    return tuple(reversed(strides))


class Shaped:
    """``ndim``, ``size``, ``itemsize`` and ``nbytes`` from a subclass's ``shape`` and NumPy ``dtype``, as a
    NumPy array has them."""

    __slots__ = ()
    shape: tuple
    dtype: Any

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize
