"""How NumPy's views read their input's memory, as stride arithmetic (`Primitive.view_strides`).

A view's result is its input's buffer read with other element strides and an element offset. Given the
input's (shape, strides, offset), each rule here gives the result's, exactly as NumPy's own view would
have them, or None where NumPy copies instead (a reshape of memory that is not laid out for it) or the
view is not a static strided one (negative steps, advanced indexing). The compiler's native backend reads
views this way without running them (kiln/jit/backends/cpu/views.py).
"""
from __future__ import annotations

from typing import Any

from ..shaped import c_strides
from ..sizes import is_symbolic_number

Strided = tuple[tuple, tuple, int]  # (shape, element strides, element offset)


def compact(shape: tuple, strides: tuple) -> bool:
    """Whether the elements sit in C order one after another (strides of size-1 dims do not matter)."""
    return all(s == c for d, s, c in zip(shape, strides, c_strides(shape)) if d != 1)


def reshaped(shape_in: tuple, strides_in: tuple, offset: int, shape: tuple) -> Strided | None:
    """A contiguous input reshapes to C strides. A strided one (a column slice, say) reshapes
    without a copy when every run of old dims merged into, or split among, new dims is itself
    contiguous in memory, as NumPy's reshape finds; otherwise NumPy copies and this is no view."""
    shape = tuple(d if is_symbolic_number(d) else int(d) for d in shape)  # (a size of the call stays one)
    if compact(shape_in, strides_in):
        return shape, c_strides(shape), offset
    if 0 in shape:
        return None
    old = [(d, s) for d, s in zip(shape_in, strides_in) if d != 1]
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
    return shape, tuple(next(it) if d != 1 else 0 for d in shape), offset


def _symbolic_slice(start: Any, stop: Any, size: Any) -> tuple[Any, Any] | None:
    """(first index, length) of ``[start:stop]`` (unit step) over a dim of `size` where a size of the call is
    involved (a plan made for every size, whose comparisons here are guards), or None for what this does not
    follow (a negative or symbolic start, a negative stop)."""
    begin = 0 if start is None else start
    if not isinstance(begin, int) or begin < 0 or (isinstance(stop, int) and stop < 0):
        return None
    end = size if stop is None or stop >= size else stop
    return (begin, end - begin) if end >= begin else (begin, 0)


def permuted(shape: tuple, strides: tuple, offset: int, perm: tuple) -> Strided:
    return tuple(shape[p] for p in perm), tuple(strides[p] for p in perm), offset


def expanded(shape_in: tuple, strides_in: tuple, offset: int, shape: tuple) -> Strided:
    """A broadcast: new leading dims and size-1 dims grown to more read with stride 0."""
    lead = len(shape) - len(shape_in)
    strides = [0] * lead
    for d_in, s_in, d_out in zip(shape_in, strides_in, shape[lead:]):
        strides.append(0 if d_in == 1 and d_out != 1 else s_in)
    return tuple(shape), tuple(strides), offset


def indexed(shape_in: tuple, strides_in: tuple, offset: int, spec: tuple) -> Strided | None:
    """Basic indexing with slices of positive step, ints, None and one Ellipsis."""
    kinds = [e[0] for e in spec]
    if any(k == "t" for k in kinds) or kinds.count("e") > 1:
        return None
    consumed = sum(1 for k in kinds if k in "si")
    if consumed > len(shape_in):
        return None
    shape, strides = [], []
    dim = 0
    for entry in spec:
        kind = entry[0]
        if kind == "e":
            for _ in range(len(shape_in) - consumed):
                shape.append(shape_in[dim])
                strides.append(strides_in[dim])
                dim += 1
        elif kind == "n":
            shape.append(1)
            strides.append(0)
        elif kind == "i":
            i = int(entry[1])
            size = shape_in[dim]
            i = i + size if i < 0 else i
            if not 0 <= i < size:
                return None
            offset += i * strides_in[dim]
            dim += 1
        else:
            start, stop, step = entry[1], entry[2], entry[3]
            if step is not None and step <= 0:
                return None
            size = shape_in[dim]
            if step in (None, 1) and any(is_symbolic_number(x) for x in (start, stop, size)):
                found = _symbolic_slice(start, stop, size)
                if found is None:
                    return None
                begin, length = found
                shape.append(length)
                strides.append(strides_in[dim])
                offset += begin * strides_in[dim]
                dim += 1
                continue
            begin, end, step = slice(start, stop, step).indices(size)
            length = len(range(begin, end, step))
            shape.append(length)
            strides.append(strides_in[dim] * step)
            if length:
                offset += begin * strides_in[dim]
            dim += 1
    while dim < len(shape_in):
        shape.append(shape_in[dim])
        strides.append(strides_in[dim])
        dim += 1
    return tuple(shape), tuple(strides), offset
