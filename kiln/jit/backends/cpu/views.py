"""Static strided layouts: how view nodes (reshape, permute, expand, slices) read their input's memory.

Inside a native segment a view costs nothing: its value is the input's buffer read with
other strides and an offset, known at lowering time because every shape is static and
every buffer the segment reads is C-contiguous (checked on each call). `view_layout`
gives the layout NumPy's own view would have, or None where NumPy would copy or the
view is not one kiln follows (negative steps, advanced indexing): that node then runs
as a NumPy step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ....ops.strided_views import compact
from ....shaped import c_strides
from ...ir import Node


@dataclass(frozen=True)
class Layout:
    """A strided view of a buffer: shape, element strides and element offset."""

    shape: tuple
    strides: tuple
    offset: int = 0

    @staticmethod
    def contiguous(shape: tuple) -> "Layout":
        return Layout(tuple(shape), c_strides(tuple(shape)), 0)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def compact(self) -> bool:
        """Whether the elements sit in C order one after another (strides of size-1 dims do not matter)."""
        return compact(self.shape, self.strides)

    def broadcast_source(self) -> tuple | None:
        """The shape this layout reads compactly when its zero-stride dims count as size 1, or None.

        A broadcast view of a contiguous array (NumPy's broadcast_to) reads like that array
        under broadcasting: a kernel can index the smaller shape instead of the view.
        """
        shape = tuple(1 if s == 0 else d for d, s in zip(self.shape, self.strides))
        if Layout(shape, self.strides, self.offset).compact():
            return shape
        return None

    def describe(self) -> str:
        return f"shape {self.shape} strides {self.strides} offset {self.offset}"


def view_layout(node: Node, x: Layout) -> Layout | None:
    """The layout of a view node's output given its input's (the primitive's `view_strides`), or None when it is
    not a static view."""
    rule = node.prim.view_strides
    if rule is None or len(node.inputs) != 1:  # (a view indexed by tensors: advanced indexing copies)
        return None
    got = rule(tuple(x.shape), tuple(x.strides), x.offset, **node.params)
    return None if got is None else Layout(*got)
