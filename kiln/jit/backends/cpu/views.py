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

from ....shaped import c_strides
from ...ir import Node

VIEW_PRIMS = {"reshape", "permute", "expand", "index", "stop_gradient"}


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
        return all(s == c for d, s, c in zip(self.shape, self.strides, c_strides(self.shape)) if d != 1)

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


def _reshape(x: Layout, shape: tuple) -> Layout | None:
    """A contiguous input reshapes to C strides. A strided one (a column slice, say) reshapes
    without a copy when every run of old dims merged into, or split among, new dims is itself
    contiguous in memory, as NumPy's reshape finds; otherwise NumPy copies and this is no view."""
    shape = tuple(int(d) for d in shape)
    if x.compact():
        return Layout(shape, c_strides(shape), x.offset)
    if 0 in shape:
        return None
    old = [(d, s) for d, s in zip(x.shape, x.strides) if d != 1]
    new = [d for d in shape if d != 1]
    strides_new: list[int] = []
    oi = ni = 0
    while oi < len(old) and ni < len(new):
        oj, nj = oi + 1, ni + 1
        op, np_ = old[oi][0], new[ni]
        while op != np_:
            if np_ < op:
                np_ *= new[nj]
                nj += 1
            else:
                op *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):  # the merged old dims must sit one after another
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        run = [old[oj - 1][1]]
        for k in range(nj - 1, ni, -1):
            run.append(run[-1] * new[k])
        strides_new += reversed(run)
        oi, ni = oj, nj
    it = iter(strides_new)
    strides = tuple(next(it) if d != 1 else 0 for d in shape)
    return Layout(shape, strides, x.offset)


def _permute(x: Layout, perm: tuple) -> Layout:
    return Layout(tuple(x.shape[p] for p in perm), tuple(x.strides[p] for p in perm), x.offset)


def _expand(x: Layout, shape: tuple) -> Layout:
    lead = len(shape) - len(x.shape)
    strides = [0] * lead
    for d_in, s_in, d_out in zip(x.shape, x.strides, shape[lead:]):
        strides.append(0 if d_in == 1 and d_out != 1 else s_in)
    return Layout(tuple(shape), tuple(strides), x.offset)


def _index(x: Layout, spec: tuple) -> Layout | None:
    """Basic indexing with slices of positive step, ints, None and one Ellipsis."""
    kinds = [e[0] for e in spec]
    if any(k == "t" for k in kinds) or kinds.count("e") > 1:
        return None
    consumed = sum(1 for k in kinds if k in "si")
    if consumed > len(x.shape):
        return None
    shape, strides = [], []
    offset = x.offset
    dim = 0
    for entry in spec:
        kind = entry[0]
        if kind == "e":
            for _ in range(len(x.shape) - consumed):
                shape.append(x.shape[dim])
                strides.append(x.strides[dim])
                dim += 1
        elif kind == "n":
            shape.append(1)
            strides.append(0)
        elif kind == "i":
            i = int(entry[1])
            size = x.shape[dim]
            i = i + size if i < 0 else i
            if not 0 <= i < size:
                return None
            offset += i * x.strides[dim]
            dim += 1
        else:
            start, stop, step = entry[1], entry[2], entry[3]
            if step is not None and step <= 0:
                return None
            size = x.shape[dim]
            begin, end, step = slice(start, stop, step).indices(size)
            length = len(range(begin, end, step))
            shape.append(length)
            strides.append(x.strides[dim] * step)
            if length:
                offset += begin * x.strides[dim]
            dim += 1
    while dim < len(x.shape):
        shape.append(x.shape[dim])
        strides.append(x.strides[dim])
        dim += 1
    return Layout(tuple(shape), tuple(strides), offset)


def view_layout(node: Node, x: Layout) -> Layout | None:
    """The layout of a view node's output given its input's, or None when it is not a static view."""
    name = node.prim.name
    if name == "reshape":
        return _reshape(x, tuple(node.params["shape"]))
    if name == "permute":
        return _permute(x, tuple(node.params["perm"]))
    if name == "expand":
        return _expand(x, tuple(node.params["shape"]))
    if name == "index":
        if len(node.inputs) != 1:
            return None
        return _index(x, tuple(node.params["spec"]))
    if name == "stop_gradient":
        return x
    return None
