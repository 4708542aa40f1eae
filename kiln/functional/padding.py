"""``F.pad`` with every PyTorch mode: 'constant', 'reflect', 'replicate' and 'circular'.

The non-constant modes are built from slicing, flip, expand and cat, one padded dim at a
time (the modes are separable, so corners come out right), so autograd and kiln.compile
need nothing of their own.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..ops.primitive import ShapeError
from ..tensor import Tensor
from . import shape as _shape
from .checks import size_tuple
from .shape import cat, expand, flip, narrow

MODES = ("constant", "reflect", "replicate", "circular")


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:  # noqa: A002
    """Pad `input` by `pad` = (left, right, top, bottom, front, back): the last dim first.

    'constant' fills with `value` (0 by default) and pads any number of dims; 'reflect' mirrors
    without repeating the edge, 'replicate' repeats the edge and 'circular' wraps around. The
    last three pad the last 1, 2 or 3 dims of an (N, C, ...) or (C, ...) input. Negative pads crop.

    >>> F.pad(kiln.arange(4.0).reshape(1, 1, 4), (2, 1), mode="reflect").tolist()
    [[[2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 2.0]]]
    """
    if mode not in MODES:
        raise ValueError(f"pad: mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}")
    pads = size_tuple("pad", tuple(pad), "pad")
    if len(pads) % 2:
        raise ValueError(f"pad: expected an even number of pads (a (before, after) pair per dim), got {pads}")
    if mode == "constant":
        return _shape.pad(input, pads, "constant", 0.0 if value is None else value)
    if value is not None and value != 0:
        raise ValueError(f"pad: mode {mode!r} takes no fill value, got value={value!r}; drop value= or use "
                         "mode='constant'")
    _check_rank(input, pads, mode)
    x = input
    for i in range(len(pads) // 2):
        x = _pad_dim(x, x.ndim - 1 - i, int(pads[2 * i]), int(pads[2 * i + 1]), mode)
    return x


def _check_rank(x: Tensor, pads: tuple, mode: str) -> None:
    k = len(pads) // 2
    if k not in (1, 2, 3) or x.ndim not in (k + 1, k + 2):
        raise NotImplementedError(
            f"pad: mode {mode!r} pads the last 1, 2 or 3 dims of a batched (N, C, ...) or unbatched (C, ...) "
            f"input, so {2 * k} pads need a {k + 1}-D or {k + 2}-D input; got {len(pads)} pads for an input of "
            f"shape {tuple(x.shape)}. Fix: pass 2, 4 or 6 pads, and add or flatten leading dims to match")


def _pad_dim(x: Tensor, d: int, lo: int, hi: int, mode: str) -> Tensor:
    """`x` padded by `lo` before and `hi` after along dim `d` (negative values crop)."""
    n = int(x.shape[d])
    if mode == "circular":  # crop first, then wrap what is left
        x = narrow(x, d, max(-lo, 0), n - max(-lo, 0) - max(-hi, 0)) if lo < 0 or hi < 0 else x
        n = int(x.shape[d])
        lo, hi = max(lo, 0), max(hi, 0)
        if lo > n or hi > n:
            raise ShapeError(f"pad: circular padding ({lo}, {hi}) of dim {d} wraps around more than once: the "
                             f"dim has size {n} (input shape {tuple(x.shape)}). Fix: pad by at most {n}")
        parts = [narrow(x, d, n - lo, lo)] if lo else []
        return cat(parts + [x] + ([narrow(x, d, 0, hi)] if hi else []), d)
    if n == 0:
        raise ShapeError(f"pad: mode {mode!r} needs a non-empty dim {d} to pad, got input shape {tuple(x.shape)}")
    if n + lo + hi <= 0:
        raise ShapeError(f"pad: padding ({lo}, {hi}) leaves nothing of dim {d} (size {n}, input shape "
                         f"{tuple(x.shape)}). Fix: crop less than the dim holds")
    if mode == "reflect" and (lo >= n or hi >= n):
        raise ShapeError(f"pad: reflect padding ({lo}, {hi}) of dim {d} must be smaller than the dim (size {n}, "
                         f"input shape {tuple(x.shape)}). Fix: pad by at most {n - 1}, or use mode='replicate'")
    before, after = max(lo, 0), max(hi, 0)
    parts = [x]
    if before:
        parts.insert(0, _edge(x, d, 0, before, mode))
    if after:
        parts.append(_edge(x, d, n - 1, after, mode))
    x = cat(parts, d) if len(parts) > 1 else x
    if lo < 0 or hi < 0:
        x = narrow(x, d, max(-lo, 0), int(x.shape[d]) - max(-lo, 0) - max(-hi, 0))
    return x


def _edge(x: Tensor, d: int, at: int, count: int, mode: str) -> Tensor:
    """The `count` values that extend dim `d` of `x` beyond its element `at` (the first or the last)."""
    if mode == "replicate":
        sizes: list[Any] = list(x.shape)
        sizes[d] = count
        return expand(narrow(x, d, at, 1), tuple(sizes))
    start = 1 if at == 0 else at - count  # reflect: the mirror image, edge not repeated
    return flip(narrow(x, d, start, count), d)
