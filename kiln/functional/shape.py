"""Shape and movement ops: views, joins, indexing, gather/scatter and masks."""
from __future__ import annotations

import math as _math
from typing import Any, Sequence

import numpy as np

from ..ops.primitive import REGISTRY, ShapeError, bind
from ..tensor import Tensor
from ..dtypes import promote
from ..sizes import is_int
from .checks import checked_index, size_tuple
from .math import _as_tensor, add, cast, ge, le, normalize_axes, where
from .reshaping import _shape_arg, reshape, squeeze_dims, view  # noqa: F401 - view: one of the shape ops too

_P = REGISTRY


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if x.ndim == 0:
        return reshape(x, (1,))
    s = start_dim % x.ndim
    e = end_dim % x.ndim
    shape = x.shape[:s] + (_math.prod(x.shape[s:e + 1]),) + x.shape[e + 1:]
    return reshape(x, shape)


def squeeze(x: Tensor, dim: Any = None) -> Tensor:
    """Drop size-1 dims (only `dim` when given, if it has size 1)."""
    if dim is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        axes = tuple(a for a in normalize_axes(dim, x.ndim, "squeeze") if x.ndim and x.shape[a] == 1)
    return squeeze_dims(x, axes)


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    d = dim if dim >= 0 else dim + x.ndim + 1
    if not 0 <= d <= x.ndim:
        raise IndexError(f"unsqueeze: dim {dim} out of range for a tensor with {x.ndim} dims")
    return reshape(x, x.shape[:d] + (1,) + x.shape[d:])


def permute(x: Tensor, *dims: Any) -> Tensor:
    perm = tuple(d % max(x.ndim, 1) for d in _shape_arg(dims))
    if perm == tuple(range(x.ndim)):
        return x
    return bind(_P["permute"], (x,), {"perm": perm})


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    n = x.ndim
    if n and dim0.__class__ is int and dim1.__class__ is int and -n <= dim0 < n and -n <= dim1 < n:
        a, b = dim0 % n, dim1 % n  # the common case, quickly (the same perm as below)
        if a == b:
            return x
        swapped = list(range(n))
        swapped[a], swapped[b] = b, a
        return bind(_P["permute"], (x,), {"perm": tuple(swapped)})
    perm = list(range(x.ndim))
    if x.ndim == 0:
        normalize_axes((dim0, dim1), 0, "transpose")  # only 0 and -1 are valid
        return x
    a, b = (normalize_axes(d, x.ndim, "transpose")[0] for d in (dim0, dim1))
    perm[a], perm[b] = perm[b], perm[a]
    return permute(x, tuple(perm))


swapaxes = transpose


def t(x: Tensor) -> Tensor:
    if x.ndim < 2:
        return x
    return transpose(x, 0, 1)


def movedim(x: Tensor, source: int, destination: int) -> Tensor:
    perm = list(range(x.ndim))
    s = perm.pop(source % x.ndim)
    perm.insert(destination % x.ndim, s)
    return permute(x, tuple(perm))


def expand(x: Tensor, *shape: Any) -> Tensor:
    """Broadcast x to `shape` (-1 keeps a dim); new leading dims are added."""
    target = size_tuple("expand", shape)
    lead = len(target) - x.ndim
    if lead < 0:
        raise ShapeError(f"expand: cannot expand shape {tuple(x.shape)} to fewer dims {target}")
    full = tuple(x.shape[i - lead] if (d == -1 and i >= lead) else d for i, d in enumerate(target))
    if full == x.shape:
        return x
    if lead:
        x = reshape(x, (1,) * lead + tuple(x.shape))
    for i, (have, want) in enumerate(zip(x.shape, full)):
        if have != 1 and have != want:
            raise ShapeError(f"expand: cannot expand shape {tuple(x.shape)[lead:]} to {full} "
                             f"(dimension {i} is {have}, wanted {want})")
    return bind(_P["expand"], (x,), {"shape": full})


def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    return expand(x, tuple(shape))


def broadcast_tensors(*xs: Tensor) -> list[Tensor]:
    shape = np.broadcast_shapes(*[x.shape for x in xs])
    return [expand(x, shape) for x in xs]


def cat(tensors: Sequence[Tensor], dim: int = 0, *, axis: int | None = None) -> Tensor:
    """Join tensors along an existing dim."""
    if axis is not None:
        dim = axis
    tensors = [_as_tensor(x) for x in tensors]
    if not tensors:
        raise ValueError("cat: expected a non-empty list of tensors")
    first = tensors[0]
    for x in tensors[1:]:
        if x.ndim != first.ndim:
            raise ShapeError(f"cat: tensors must have the same number of dims, got shapes "
                             f"{tuple(first.shape)} and {tuple(x.shape)}")
    d = normalize_axes(dim, first.ndim, "cat")[0]
    dtype = first.dtype
    for x in tensors[1:]:
        dtype = promote(dtype, x.dtype)
    tensors = [cast(x, dtype) for x in tensors]
    if len(tensors) == 1:
        return tensors[0]
    return bind(_P["concat"], tuple(tensors), {"axis": d})


concatenate = cat
concat = cat


def stack(tensors: Sequence[Tensor], dim: int = 0, *, axis: int | None = None) -> Tensor:
    """Join tensors along a new dim."""
    if axis is not None:
        dim = axis
    tensors = [_as_tensor(x) for x in tensors]
    if not tensors:
        raise ValueError("stack: expected a non-empty list of tensors")
    for x in tensors[1:]:
        if x.shape != tensors[0].shape:
            raise ShapeError(f"stack: all tensors must have the same shape, got {tuple(tensors[0].shape)} "
                             f"and {tuple(x.shape)}")
    d = dim if dim >= 0 else dim + tensors[0].ndim + 1
    return cat([unsqueeze(x, d) for x in tensors], d)


def split(x: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into chunks of a size, or of the given list of sizes."""
    d = normalize_axes(dim, x.ndim, "split")[0]
    size = x.shape[d]
    if is_int(split_size_or_sections):
        step = split_size_or_sections
        if step <= 0:
            raise ValueError(f"split: split size must be positive, got {step}")
        # chunk k starts at k * step: a running sum of symbolic sizes (dynamic_dims) would nest deeper
        # with every chunk
        return tuple(narrow(x, d, k * step, min(step, size - k * step)) for k in range(int(-(-size // step))))
    sizes = list(split_size_or_sections)
    if sum(sizes) != size:
        raise ShapeError(f"split: sizes {sizes} do not add up to {size} (dim {dim} of {tuple(x.shape)})")
    out, start = [], 0
    for n in sizes:
        out.append(narrow(x, d, start, n))
        start += n
    return tuple(out)


def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    d = normalize_axes(dim, x.ndim, "chunk")[0]
    step = -(-x.shape[d] // chunks)
    return split(x, step, d)


def narrow(x: Tensor, dim: int, start: int, length: int) -> Tensor:
    spec = tuple(("s", start, start + length, 1) if i == dim else ("s", None, None, None) for i in range(x.ndim))
    return bind(_P["index"], (x,), {"spec": spec})


def unbind(x: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    d = normalize_axes(dim, x.ndim, "unbind")[0]
    return tuple(select(x, d, i) for i in range(int(x.shape[d])))  # int(): a dynamic size specializes


def select(x: Tensor, dim: int, index: int) -> Tensor:
    spec = tuple(("i", int(index)) if i == dim else ("s", None, None, None) for i in range(x.ndim))
    return bind(_P["index"], (x,), {"spec": spec})


def flip(x: Tensor, dims: Any) -> Tensor:
    axes = normalize_axes(dims, x.ndim, "flip")
    return bind(_P["flip"], (x,), {"axes": axes})


def roll(x: Tensor, shifts: Any, dims: Any = None) -> Tensor:
    """x with its elements shifted `shifts` places along `dims`, wrapping around (differentiable).

    Without `dims` the flattened tensor is rolled and the shape kept.

    >>> kiln.roll(kiln.arange(5), 2).tolist()
    [3, 4, 0, 1, 2]
    >>> kiln.arange(6).reshape(2, 3).roll((1, -1), dims=(0, 1)).tolist()
    [[4, 5, 3], [1, 2, 0]]
    """
    shift_list = list(size_tuple("roll", (shifts,) if not isinstance(shifts, (tuple, list)) else tuple(shifts),
                                 "shifts"))
    if dims is None:
        if len(shift_list) != 1:
            raise ValueError(f"roll: without dims, shifts must be one int (the flattened tensor is rolled), got "
                             f"{len(shift_list)} shifts {tuple(shift_list)}; pass dims=... with one dim per shift")
        return reshape(roll(flatten(x), shift_list[0], 0), tuple(x.shape))
    dim_list = [dims] if not isinstance(dims, (tuple, list)) else list(dims)
    if len(dim_list) != len(shift_list):
        raise ValueError(f"roll: shifts and dims must have one entry each per rolled dim, got {len(shift_list)} "
                         f"shifts {tuple(shift_list)} and {len(dim_list)} dims {tuple(dim_list)}")
    for shift, dim in zip(shift_list, dim_list):
        d = normalize_axes(dim, x.ndim, "roll")[0]
        size = x.shape[d] if x.ndim else 1
        if not size or not shift % size:
            continue
        keep = size - shift % size  # the first `keep` elements move to the end
        x = cat([narrow(x, d, keep, size - keep), narrow(x, d, 0, keep)], d)
    return x


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float = 0.0) -> Tensor:
    """PyTorch-style pad: (left, right, top, bottom, ...) from the last dim backwards."""
    if mode != "constant":
        raise NotImplementedError(f"pad: mode {mode!r} is not supported; only 'constant'")
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"pad: expected an even number of pads for at most {x.ndim} dims, got {tuple(pad)}")
    pairs = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        pairs[x.ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    if any(lo < 0 or hi < 0 for lo, hi in pairs):
        spec = tuple(("s", -lo if lo < 0 else None, hi if hi < 0 else None, None) for lo, hi in pairs)
        x = bind(_P["index"], (x,), {"spec": spec})
        pairs = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
    if all(p == (0, 0) for p in pairs):
        return x
    return bind(_P["pad"], (x,), {"pads": tuple(pairs), "value": float(value)})


# ---- indexing ---------------------------------------------------------------------
def _index_spec(x: Tensor, index: Any) -> tuple[tuple, list[Tensor]]:
    """Parse a Python index into a static spec plus tensor index inputs."""
    if not isinstance(index, tuple):
        index = (index,)
    spec: list[tuple] = []
    tensors: list[Tensor] = []
    for item in index:
        if item is None:
            spec.append(("n",))
        elif item is Ellipsis:
            spec.append(("e",))
        elif isinstance(item, slice):
            spec.append(("s", _int_or_none(item.start), _int_or_none(item.stop), _int_or_none(item.step)))
        elif isinstance(item, (bool, np.bool_)):
            spec.append(("t",))
            tensors.append(Tensor._wrap(np.asarray(bool(item))))
        elif is_int(item) or isinstance(item, np.integer):
            spec.append(("i", int(item)))
        elif isinstance(item, Tensor) and item.ndim == 0 and item._data.dtype.kind in "iu":
            spec.append(("i", int(item)))
        else:
            idx = item if isinstance(item, Tensor) else _as_tensor(np.asarray(item))
            if idx._data.dtype.kind == "b":
                # a boolean mask becomes integer indices: data-dependent shape
                nz = idx._concrete("nonzero")
                for arr in nz.nonzero():
                    spec.append(("t",))
                    tensors.append(Tensor._wrap(arr.astype(np.int64), idx._device))
                continue
            if idx._data.dtype.kind not in "iu":
                raise IndexError(f"tensors used as indices must be integer or bool, got {idx.dtype.name}")
            spec.append(("t",))
            tensors.append(idx)
    return tuple(spec), tensors


def _int_or_none(v: Any) -> int | None:
    return None if v is None else (v if is_int(v) else int(v))  # SymInt bounds stay symbolic


def getitem(x: Tensor, index: Any) -> Tensor:
    """x[index]: slices, None, Ellipsis, ints, integer tensors and boolean masks, with grads."""
    spec, tensors = _index_spec(x, index)
    return bind_index(x, tensors, spec)


def bind_index(x: Tensor, idx: Sequence[Tensor], spec: tuple) -> Tensor:
    return bind(_P["index"], (x, *idx), {"spec": spec})


def index_grad(g: Tensor, idx: Sequence[Tensor], spec: tuple, shape: Sequence[int]) -> Tensor:
    return bind(_P["index_grad"], (g, *idx), {"spec": spec, "shape": tuple(shape)})


def index_put(x: Tensor, v: Tensor, idx: Sequence[Tensor], spec: tuple) -> Tensor:
    if v._data.dtype != x._data.dtype:
        v = cast(v, x.dtype)
    return bind(_P["index_put"], (x, v, *idx), {"spec": spec})


def setitem_value(x: Tensor, index: Any, value: Any) -> Tensor:
    """The out-of-place result of x[index] = value."""
    spec, tensors = _index_spec(x, index)
    v = value if isinstance(value, Tensor) else Tensor._wrap(x._device.xp.asarray(value, dtype=x._data.dtype), x._device)
    return index_put(x, v, tensors, spec)


def _check_integer_index(index: Tensor, op: str) -> None:
    """Index tensors of gather-like ops hold integers; a float or bool index would be cast silently."""
    if index._data.dtype.kind not in "iu":
        raise TypeError(f"{op}: index must be an integer tensor (int64), got {index.dtype.name}")


def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """The entries of x at `index` (integers in [0, size)) along dim; negative indices raise, as in PyTorch."""
    d = normalize_axes(dim, x.ndim, "index_select")[0]
    spec = tuple(("t",) if i == d else ("s", None, None, None) for i in range(x.ndim))
    index = _as_tensor(index)
    _check_integer_index(index, "index_select")
    index = checked_index("index_select", index, x, d)
    if index.ndim == 0:  # a 0-d index keeps the dim, with size 1 (as PyTorch)
        index = reshape(index, (1,))
    return bind_index(x, [index], spec)


def index_copy(x: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """A copy of x whose entries at `index` along dim are replaced by `source`'s, in order
    (``out.select(dim, index[i]) = source.select(dim, i)``); PyTorch's ``torch.index_copy``.

    `index` is a 1-D (or 0-d) integer tensor of positions in ``[0, x.shape[dim])``; `source` has
    x's shape with ``len(index)`` at dim. Both x and source get gradients.

    >>> cache = kiln.zeros(1, 2, 8, 4)
    >>> cache.index_copy_(2, kiln.tensor([3]), kiln.ones(1, 2, 1, 4)).sum()
    tensor(8.)
    """
    d, index, source = _slices_at("index_copy", x, dim, index, source)
    spec = tuple(("t",) if i == d else ("s", None, None, None) for i in range(x.ndim))
    return index_put(x, source, [index], spec)


def _slices_at(name: str, x: Tensor, dim: int, index: Any, source: Any) -> tuple[int, Tensor, Tensor]:
    """The checked arguments of index_copy and index_add: (the dim, index as a 1-D tensor of positions in range,
    source with x's shape but ``len(index)`` at the dim; a 0-d index lets source leave the dim out)."""
    d = normalize_axes(dim, x.ndim, name)[0]
    index = _as_tensor(index)
    _check_integer_index(index, name)
    if index.ndim > 1:
        raise ShapeError(f"{name}: index must be 1-D (or 0-d), got shape {tuple(index.shape)}")
    if not isinstance(source, Tensor):
        raise TypeError(f"{name}: source must be a Tensor, got {type(source).__name__}")
    count = 1 if index.ndim == 0 else index.shape[0]
    want = tuple(count if i == d else n for i, n in enumerate(x.shape))
    if index.ndim == 0 and source.ndim == x.ndim - 1:  # a 0-d index: source lacks the dim
        source = unsqueeze(source, d)
    if tuple(source.shape) != want:
        raise ShapeError(f"{name}: source of shape {tuple(source.shape)} does not fit: expected {want} "
                         f"(x's shape {tuple(x.shape)} with the {count} indexed positions at dim {d})")
    return d, checked_index(name, reshape(index, (count,)), x, d), source


def index_add(x: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
    """A copy of x with ``alpha * source``'s slices added at `index` along dim, a repeated position adding
    up (``out.select(dim, index[i]) += alpha * source.select(dim, i)``); PyTorch's ``torch.index_add``.

    `index` is a 1-D (or 0-d) integer tensor of positions in ``[0, x.shape[dim])``; `source` has
    x's shape with ``len(index)`` at dim. Both x and source get gradients. The additions run in
    index order (a scatter_add), as PyTorch's CPU kernel makes them.

    >>> kiln.zeros(3, 2).index_add(0, kiln.tensor([0, 2, 0]), kiln.ones(3, 2))
    tensor([[2., 2.],
            [0., 0.],
            [1., 1.]])
    """
    d, index, source = _slices_at("index_add", x, dim, index, source)
    along = tuple(index.shape[0] if i == d else 1 for i in range(x.ndim))
    if not (isinstance(alpha, (int, float)) and alpha == 1):
        source = source * alpha
    return scatter_add_unchecked(x, d, expand(reshape(index, along), tuple(source.shape)), source)


def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """out[i][j] = x[i][index[i][j]] for dim=1 (PyTorch semantics: indices in [0, size), no negatives)."""
    d = normalize_axes(dim, x.ndim, "gather")[0]
    _check_integer_index(index, "gather")
    index = checked_index("gather", index, x, d)
    return gather_unchecked(x, d, index)


def gather_unchecked(x: Tensor, d: int, index: Tensor) -> Tensor:
    """`gather` along the normalized dim `d` without the value range check (VJPs, take_along_dim)."""
    if index.ndim != x.ndim:
        raise ShapeError(f"gather: index has {index.ndim} dims but input has {x.ndim} (shapes "
                         f"{tuple(index.shape)} and {tuple(x.shape)})")
    if any(index.shape[i] > x.shape[i] for i in range(x.ndim) if i != d):
        raise ShapeError(f"gather: index shape {tuple(index.shape)} exceeds input shape {tuple(x.shape)} "
                         f"outside dim {d}")
    if any(index.shape[i] != x.shape[i] for i in range(x.ndim) if i != d):
        spec = tuple(("s", None, None, None) if i == d else ("s", 0, index.shape[i], 1) for i in range(x.ndim))
        x = bind_index(x, (), spec)
    return bind(_P["gather"], (x, cast(index, "int64")), {"axis": d})


def scatter_add(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """A copy of x with src added at index along dim (out-of-place scatter_add; indices in [0, size))."""
    d = normalize_axes(dim, x.ndim, "scatter_add")[0]
    _check_integer_index(index, "scatter_add")
    index = checked_index("scatter_add", index, x, d)
    return scatter_add_unchecked(x, d, index, src)


def scatter_add_unchecked(x: Tensor, d: int, index: Tensor, src: Tensor) -> Tensor:
    """`scatter_add` along the normalized dim `d` without the value range check (VJPs)."""
    if tuple(src.shape) != tuple(index.shape):
        spec = tuple(("s", 0, n, 1) for n in index.shape)
        src = bind_index(src, (), spec)
    if src._data.dtype != x._data.dtype:
        src = cast(src, x.dtype)
    return bind(_P["scatter_add"], (x, cast(index, "int64"), src), {"axis": d})


def take_along_dim(x: Tensor, indices: Tensor, dim: int) -> Tensor:
    """`gather`, except that negative indices count from the end (as in PyTorch)."""
    d = normalize_axes(dim, x.ndim, "take_along_dim")[0]
    _check_integer_index(indices, "take_along_dim")
    indices = checked_index("take_along_dim", indices, x, d, allow_negative=True)
    return gather_unchecked(x, d, indices)


def masked_fill(x: Tensor, mask: Tensor, value: Any) -> Tensor:
    """x with `value` where mask is true (mask broadcasts)."""
    fill = value if isinstance(value, Tensor) else Tensor._wrap(x._device.xp.asarray(value, dtype=x._data.dtype), x._device)
    return where(mask, cast(fill, x.dtype), x)


def _tri_mask(x: Tensor, diagonal: int, upper: bool) -> Tensor:
    from .creation import arange  # noqa: PLC0415

    rows, cols = x.shape[-2], x.shape[-1]
    r = reshape(arange(rows, device=x.device), (rows, 1))
    c = reshape(arange(cols, device=x.device), (1, cols))
    return ge(c, add(r, diagonal)) if upper else le(c, add(r, diagonal))


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims (zeros above `diagonal`)."""
    return where(_tri_mask(x, diagonal, upper=False), x, False)  # False: the zero that keeps x's dtype


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims (zeros below `diagonal`)."""
    return where(_tri_mask(x, diagonal, upper=True), x, False)  # False: the zero that keeps x's dtype


def clone(x: Tensor) -> Tensor:
    return bind(_P["copy"], (x,), {})


def contiguous(x: Tensor) -> Tensor:
    if x._data.flags.c_contiguous:
        return x
    return clone(x)


def to_device(x: Tensor, device: Any) -> Tensor:
    """Move x to another device (a copy); gradients flow back to x's device (kiln/ops/device_copy.py)."""
    from ..ops.device_copy import transfer  # noqa: PLC0415

    return transfer(x, device)


