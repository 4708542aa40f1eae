"""`Shaped`: the metadata an array stand-in derives from its shape, for objects that carry no elements
(a djit op's `PendingArray`, kiln/ops/pending.py; an autograd node's `ShapeOnly`, kiln/unread_inputs.py)."""
from __future__ import annotations

import math


class Shaped:
    """``ndim`` and ``size`` from a subclass's ``shape``, as a NumPy array has them."""

    __slots__ = ()
    shape: tuple

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)
