"""``F.embedding_bag``: sums, means or maxes of bags of embedding rows, without the (bags, ids, dim) tensor.

A 2-D input is a batch of equal-sized bags (one per row). A 1-D input is cut into bags at
`offsets`; each position gets its bag's number from a running count of the bag starts, and
'sum'/'mean' scatter-add the rows into their bags. 'max' runs a segmented prefix max (log2 of
the length steps of shifted maxima within a bag) and reads each bag's last position. All of it
is kiln ops, so gradients and kiln.compile come for free; the checks on the offsets' values
run in eager code only.
"""
from __future__ import annotations

from typing import Any

from ..ops.primitive import ShapeError
from ..trace_state import trace_state
from ..tensor import Tensor
from .creation import full, ones, zeros
from .layers import embedding
from .math import amax, cast, clamp, cumsum, div, eq, gt, maximum, mul, ne, sub, sum, where
from .shape import cat, expand, narrow, scatter_add, unsqueeze

MODES = ("sum", "mean", "max")


def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None,  # noqa: A002
                  max_norm: float | None = None, norm_type: float = 2, scale_grad_by_freq: bool = False,
                  mode: str = "mean", sparse: bool = False, per_sample_weights: Tensor | None = None,
                  include_last_offset: bool = False, padding_idx: int | None = None) -> Tensor:
    """The 'sum', 'mean' or 'max' of the `weight` rows each bag of ids picks: (bags, embedding_dim).

    Bags are the rows of a 2-D `input`, or the runs of a 1-D `input` starting at `offsets`
    (the first is 0; with `include_last_offset` one more offset, the input's length, comes last, as in
    the CSR format; like PyTorch, the last bag runs to the input's end whatever it says). Ids equal
    to `padding_idx` are left out of their bag; an empty bag gives zeros. `per_sample_weights`
    (the shape of `input`) scales each row, in mode 'sum' only.

    >>> F.embedding_bag(kiln.tensor([1, 2, 4, 5]), kiln.randn(10, 3), kiln.tensor([0, 2]), mode="sum").shape
    (2, 3)
    """
    _check_args(input, weight, max_norm, scale_grad_by_freq, mode, sparse, per_sample_weights)
    if padding_idx is not None:
        rows_total = weight.shape[0]
        if not -rows_total <= padding_idx < rows_total:
            raise ValueError(f"embedding_bag: padding_idx must be within [-{rows_total}, {rows_total}) (the rows of "
                             f"weight), got {padding_idx}")
        padding_idx %= rows_total
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: a 2-D input is a batch of equal-sized bags (one per row), so offsets "
                             "must be None; pass a 1-D input to cut bags at offsets")
        return _fixed_bags(input, weight, mode, per_sample_weights, padding_idx)
    if offsets is None or offsets.ndim != 1:
        got = "None" if offsets is None else f"shape {tuple(offsets.shape)}"
        raise ValueError(f"embedding_bag: a 1-D input needs 1-D offsets (where each bag starts), got {got}; "
                         "pass offsets, or a 2-D input of equal-sized bags")
    if offsets.dtype.is_floating_point or offsets.dtype.name == "bool":
        raise TypeError(f"embedding_bag: offsets must be integers, got {offsets.dtype.name}")
    if trace_state.tracer is None:
        _check_offsets(offsets, input.shape[0], include_last_offset)
    if include_last_offset:  # the last offset marks the end: the last bag still runs to the input's end
        offsets = narrow(offsets, 0, 0, offsets.shape[0] - 1)
    return _offset_bags(input, weight, cast(offsets, "int64"), mode, per_sample_weights, padding_idx)


def _check_args(input: Tensor, weight: Tensor, max_norm: Any, scale_grad_by_freq: bool, mode: str,  # noqa: A002
                sparse: bool, per_sample_weights: Tensor | None) -> None:
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding_bag: max_norm, scale_grad_by_freq and sparse are not supported; "
                                  "leave them at their defaults")
    if mode not in MODES:
        raise ValueError(f"embedding_bag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    if weight.ndim != 2:
        raise ShapeError(f"embedding_bag: weight must be 2-D (num_embeddings, embedding_dim), got shape "
                         f"{tuple(weight.shape)}")
    if input.dtype.is_floating_point or input.dtype.name == "bool":
        raise TypeError(f"embedding_bag: input must hold integer ids, got {input.dtype.name}")
    if input.ndim not in (1, 2):
        raise ValueError(f"embedding_bag: input must be 1-D (with offsets) or 2-D (one bag per row), got shape "
                         f"{tuple(input.shape)}")
    if per_sample_weights is None:
        return
    if mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights is only supported with mode='sum', got "
                                  f"mode={mode!r}")
    if tuple(per_sample_weights.shape) != tuple(input.shape):
        raise ShapeError(f"embedding_bag: per_sample_weights must have the input's shape {tuple(input.shape)}, got "
                         f"{tuple(per_sample_weights.shape)}")


def _check_offsets(offsets: Tensor, length: int, include_last_offset: bool) -> None:
    values = offsets.numpy()
    if values.size and values[0] != 0:
        raise ValueError(f"embedding_bag: offsets[0] must be 0 (the first bag starts at the first id), got "
                         f"{int(values[0])}")
    if values.size and (values[1:] < values[:-1]).any():
        raise ValueError(f"embedding_bag: offsets must be non-decreasing (bag starts in order), got "
                         f"{values.tolist()}")
    if values.size and values[-1] > length:
        raise ValueError(f"embedding_bag: offsets[-1] must not exceed the input's length {length}, got "
                         f"{int(values[-1])}")
    if include_last_offset and not values.size:
        raise ValueError("embedding_bag: include_last_offset=True needs at least one offset (the end of the "
                         "last bag)")


def _fixed_bags(input: Tensor, weight: Tensor, mode: str, per_sample_weights: Tensor | None,  # noqa: A002
                padding_idx: int | None) -> Tensor:
    """Bags that are the rows of a 2-D input: a reduction over dim 1."""
    if input.shape[1] == 0:
        return zeros(input.shape[0], weight.shape[1], dtype=weight.dtype, device=weight.device)
    rows = embedding(input, weight)  # (bags, ids, dim)
    if per_sample_weights is not None:
        rows = mul(rows, unsqueeze(cast(per_sample_weights, weight.dtype), 2))
    keep = None if padding_idx is None else unsqueeze(ne(input, padding_idx), 2)
    if mode == "max":
        if keep is None:
            return amax(rows, 1)
        best = amax(where(keep, rows, float("-inf")), 1)
        return where(gt(sum(keep, 1), 0), best, 0.0)
    total = sum(rows if keep is None else where(keep, rows, 0.0), 1)
    if mode == "sum":
        return total
    count = input.shape[1] if keep is None else clamp(cast(sum(keep, 1), weight.dtype), 1.0)
    return div(total, count)


def _offset_bags(input: Tensor, weight: Tensor, offsets: Tensor, mode: str,  # noqa: A002
                 per_sample_weights: Tensor | None, padding_idx: int | None) -> Tensor:
    """Bags cut from a 1-D input at `offsets` (bag starts); the last bag runs to the end."""
    n, dim = input.shape[0], weight.shape[1]
    bags = offsets.shape[0]
    if n == 0 or bags == 0:
        return zeros(bags, dim, dtype=weight.dtype, device=weight.device)
    # each position's bag: how many bag starts lie at or before it, less one
    marks = scatter_add(zeros(n + 1, dtype="int64", device=input.device), 0, offsets,
                        ones(offsets.shape[0], dtype="int64", device=input.device))
    bag_of = sub(narrow(cumsum(marks, 0), 0, 0, n), 1)
    keep = None if padding_idx is None else ne(input, padding_idx)
    rows = embedding(input, weight)  # (ids, dim)
    if per_sample_weights is not None:
        rows = mul(rows, unsqueeze(cast(per_sample_weights, weight.dtype), 1))
    counted = bag_of if keep is None else where(keep, bag_of, bags)  # padding ids go to an extra, dropped bag
    count = narrow(scatter_add(zeros(bags + 1, dtype=weight.dtype, device=weight.device), 0, counted,
                               ones(n, dtype=weight.dtype, device=weight.device)), 0, 0, bags)
    if mode == "max":
        return _segment_max(rows, bag_of, keep, offsets, count, n, bags)
    index = expand(unsqueeze(counted, 1), (n, dim))
    total = narrow(scatter_add(zeros(bags + 1, dim, dtype=weight.dtype, device=weight.device), 0, index, rows),
                   0, 0, bags)
    if mode == "sum":
        return total
    return div(total, unsqueeze(clamp(count, 1.0), 1))


def _segment_max(rows: Tensor, bag_of: Tensor, keep: Tensor | None, offsets: Tensor, count: Tensor, n: int,
                 bags: int) -> Tensor:
    """Each bag's elementwise max row: a prefix max within bags, read at each bag's last position."""
    if keep is not None:
        rows = where(unsqueeze(keep, 1), rows, float("-inf"))
    step = 1
    while step < n:
        same = unsqueeze(eq(narrow(bag_of, 0, step, n - step), narrow(bag_of, 0, 0, n - step)), 1)
        tail = narrow(rows, 0, step, n - step)
        rows = cat([narrow(rows, 0, 0, step), where(same, maximum(tail, narrow(rows, 0, 0, n - step)), tail)], 0)
        step *= 2
    ends = cat([narrow(offsets, 0, 1, bags - 1), full((1,), n, dtype="int64", device=offsets.device)], 0)
    last = clamp(sub(ends, 1), 0)
    picked = embedding(last, rows)
    return where(unsqueeze(gt(count, 0), 1), picked, 0.0)

