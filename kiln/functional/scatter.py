"""Scatter with overwrite and with reductions: ``kiln.scatter`` and ``kiln.scatter_reduce``.

``scatter(x, dim, index, src)`` is a copy of x with ``out[i][index[i][j]] = src[i][j]`` for
dim=1 (and likewise for every dim): an ``index_put`` at index grids, so the gradient reaches
src through the scattered positions and x where it was not overwritten. Where an index
repeats, one of its values lands (the last in C order, as PyTorch's CPU kernel gives, though
neither promises it). ``scatter_reduce`` combines values with sum, prod,
mean, amax or amin; sum and mean are scatter_adds, the rest one primitive
(kiln/ops/scatter.py) whose VJP is `scatter_reduce_vjp` below.

>>> kiln.zeros(3, 4).scatter(1, kiln.tensor([[1], [3], [0]]), 1.0)   # one-hot rows
"""
from __future__ import annotations

import warnings
from typing import Any

from ..ops.primitive import REGISTRY, ShapeError, bind
from ..tensor import Tensor
from .checks import checked_index
from .creation import arange, full, zeros
from .math import cast, div, eq, floor_divide, gt, logical_and, logical_not, maximum, mul, normalize_axes, where
from .shape import _check_integer_index, bind_index, gather_unchecked, index_put, reshape, scatter_add_unchecked

REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _prepare(op: str, x: Tensor, dim: int, index: Tensor, src: Tensor | None) -> tuple[int, Tensor, Tensor | None]:
    """The normalized dim, the range-checked index and src cut to index's shape, after PyTorch's shape rules."""
    if not isinstance(index, Tensor):
        raise TypeError(f"{op}(): index must be a kiln.Tensor of int64, got {type(index).__name__}")
    _check_integer_index(index, op)
    if x.ndim == 0:
        raise ShapeError(f"{op}(): self is a 0-d tensor; scatter into x.reshape(1) and reshape the result back")
    d = normalize_axes(dim, x.ndim, op)[0]
    if index.ndim == 0:
        index = reshape(index, (1,) * x.ndim)
    if src is not None and src.ndim == 0:
        src = reshape(src, (1,) * x.ndim)
    if index.ndim != x.ndim or (src is not None and src.ndim != x.ndim):
        got = f"index {tuple(index.shape)}" + ("" if src is None else f", src {tuple(src.shape)}")
        raise ShapeError(f"{op}(): index{' and src' if src is not None else ''} must have as many dims as self "
                         f"{tuple(x.shape)}, got {got}")
    if any(index.shape[i] > x.shape[i] for i in range(x.ndim) if i != d):
        raise ShapeError(f"{op}(): index {tuple(index.shape)} must be no larger than self {tuple(x.shape)} "
                         f"apart from dimension {d}")
    if src is not None:
        if any(index.shape[i] > src.shape[i] for i in range(x.ndim)):
            raise ShapeError(f"{op}(): index {tuple(index.shape)} must be no larger than src {tuple(src.shape)}")
        if src._data.dtype != x._data.dtype:
            raise TypeError(f"{op}(): src has dtype {src.dtype.name} but self has {x.dtype.name}; cast src "
                            f"first, e.g. src.to(self.dtype)")
        if tuple(src.shape) != tuple(index.shape):
            src = bind_index(src, (), tuple(("s", 0, n, 1) for n in index.shape))
    return d, cast(checked_index(op, index, x, d), "int64"), src


def _grids(x: Tensor, d: int, index: Tensor) -> list[Tensor]:
    """Index tensors that address, for each element of `index`, its target element of x."""
    grids = []
    for axis, n in enumerate(index.shape):
        if axis == d:
            grids.append(index)
        else:
            shape = tuple(n if a == axis else 1 for a in range(index.ndim))
            grids.append(reshape(arange(n, device=x.device), shape))
    return grids


def _scalar(x: Tensor, value: Any) -> Any:
    """A number as x's kind of Python scalar (a float truncates into an integer tensor, as in PyTorch)."""
    kind = x._data.dtype.kind
    return int(value) if kind in "iu" else bool(value) if kind == "b" else float(value)


def _value(x: Tensor, value: Any) -> Tensor:
    """A number `value` as a 0-d tensor of x's dtype."""
    return Tensor._wrap(x._device.xp.asarray(_scalar(x, value), dtype=x._data.dtype), x._device)


def scatter(input: Tensor, dim: int, index: Tensor, src: Any = None, *, value: Any = None,  # noqa: A002
            reduce: str | None = None) -> Tensor:
    """A copy of input with src (a tensor, or a number `value`) written at index along dim.

    For dim=1: ``out[i][index[i][j]] = src[i][j]``. index has input's dims and is no larger
    than input off dim, nor than src anywhere. ``reduce="add"`` or ``"multiply"`` combines
    instead of overwriting (PyTorch's legacy form; prefer `scatter_reduce`).

    >>> kiln.zeros(2, 3).scatter(1, kiln.tensor([[2], [0]]), kiln.tensor([[5.0], [7.0]]))
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"scatter(): input must be a kiln.Tensor, got {type(input).__name__}")
    if src is not None and value is not None:
        raise TypeError("scatter(): pass either src or value, not both")
    if src is None:
        if value is None:
            raise TypeError("scatter(): missing the values: pass src (a tensor) or value (a number)")
        src = value
    is_tensor = isinstance(src, Tensor)
    if reduce is not None:
        return _legacy_reduce(input, dim, index, src, reduce, is_tensor)
    d, index, src_t = _prepare("scatter", input, dim, index, src if is_tensor else None)
    v = src_t if is_tensor else _value(input, src)
    return index_put(input, v, _grids(input, d, index), (("t",),) * input.ndim)


def _legacy_reduce(x: Tensor, dim: int, index: Tensor, src: Any, reduce: str, is_tensor: bool) -> Tensor:
    if reduce not in ("add", "multiply"):
        raise ValueError(f"scatter(): reduce must be 'add' or 'multiply', got {reduce!r}; for sum, prod, "
                         "mean, amax or amin use scatter_reduce")
    if is_tensor:
        warnings.warn("scatter(..., reduce=) with a tensor src is deprecated in PyTorch; use "
                      "scatter_reduce(dim, index, src, reduce='sum' or 'prod')", UserWarning, stacklevel=3)
    else:  # a number: a tensor of index's shape (scatter_reduce checks the index)
        shape = tuple(index.shape) if isinstance(index, Tensor) and index.ndim else (1,) * x.ndim
        src = full(shape, _scalar(x, src), dtype=x.dtype, device=x.device)
    return scatter_reduce(x, dim, index, src, "sum" if reduce == "add" else "prod")


def _scattered(x: Tensor, d: int, index: Tensor) -> Tensor:
    """How many values land on each element of x (int64)."""
    ones = full(tuple(index.shape), 1, dtype="int64", device=x.device)
    return scatter_add_unchecked(zeros(tuple(x.shape), dtype="int64", device=x.device), d, index, ones)


def scatter_reduce(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,  # noqa: A002
                   include_self: bool = True) -> Tensor:
    """A copy of input with src combined in at index along dim by `reduce`: "sum", "prod", "mean", "amax", "amin".

    With ``include_self=False`` the elements that receive values forget input's value first.
    An integer "mean" rounds down, as in PyTorch. Differentiable in input and src.

    >>> kiln.zeros(3).scatter_reduce(0, kiln.tensor([0, 0, 2]), kiln.tensor([1.0, 5.0, 2.0]), "amax")
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"scatter_reduce(): input must be a kiln.Tensor, got {type(input).__name__}")
    if not isinstance(src, Tensor):
        raise TypeError(f"scatter_reduce(): src must be a kiln.Tensor, got {type(src).__name__}; "
                        "for a number use scatter(dim, index, value)")
    if reduce not in REDUCTIONS:
        raise ValueError(f"scatter_reduce(): reduce must be one of {', '.join(REDUCTIONS)}, got {reduce!r}")
    d, index, src = _prepare("scatter_reduce", input, dim, index, src)
    if reduce in ("prod", "amax", "amin"):
        return bind(REGISTRY["scatter_reduce"], (input, index, src),
                    {"axis": d, "reduce": reduce, "include_self": bool(include_self)})
    base = input
    if not include_self:
        base = where(gt(_scattered(input, d, index), 0), False, input)  # False: the zero of input's dtype
    total = scatter_add_unchecked(base, d, index, src)
    if reduce == "sum":
        return total
    count = scatter_add_unchecked(full(tuple(input.shape), int(bool(include_self)), dtype="int64",
                                       device=input.device), d, index,
                                  full(tuple(index.shape), 1, dtype="int64", device=input.device))
    count = cast(maximum(count, 1), input.dtype)
    return div(total, count) if input.is_floating_point() else floor_divide(total, count)


def scatter_reduce_vjp(g: Tensor, base: Tensor, index: Tensor, src: Tensor, out: Tensor, d: int, reduce: str,
                       include_self: bool) -> tuple[Tensor, Tensor]:
    """Gradients of the scatter_reduce primitive (prod, amax, amin) to base and src."""
    if include_self:
        self_in = full((), True, dtype="bool", device=base.device)
    else:
        self_in = logical_not(gt(_scattered(base, d, index), 0))  # only where nothing landed
    if reduce in ("amax", "amin"):  # shared evenly among the values equal to the result
        src_hit = eq(src, gather_unchecked(out, d, index))
        self_hit = logical_and(eq(base, out), self_in)
        ties = scatter_add_unchecked(cast(self_hit, g.dtype), d, index, cast(src_hit, g.dtype))
        share = div(g, maximum(ties, 1))
        return where(self_hit, share, False), where(src_hit, gather_unchecked(share, d, index), False)
    # prod: g * out / factor, except at zeros: the product of the other factors when it is the only zero
    base_zero, src_zero = eq(base, 0), eq(src, 0)
    zeros_here = scatter_add_unchecked(cast(logical_and(base_zero, self_in), "int64"), d, index,
                                       cast(src_zero, "int64"))
    one_zero = eq(zeros_here, 1)
    base_nz, src_nz = where(base_zero, 1, base), where(src_zero, 1, src)
    others = bind(REGISTRY["scatter_reduce"], (base_nz, index, src_nz),
                  {"axis": d, "reduce": "prod", "include_self": include_self})
    at_zero = where(one_zero, mul(g, others), False)
    gb = where(self_in, where(base_zero, at_zero, div(mul(g, out), base_nz)), False)
    gs = where(src_zero, gather_unchecked(at_zero, d, index),
               div(gather_unchecked(mul(g, out), d, index), src_nz))
    return gb, gs


__all__ = ["scatter", "scatter_reduce"]
