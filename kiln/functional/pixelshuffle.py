"""``F.pixel_shuffle`` and ``F.pixel_unshuffle``: trade channels for spatial resolution (reshape + permute)."""
from __future__ import annotations

import operator
from typing import Any

from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .shape import permute, reshape


def _factor(op: str, arg: str, value: Any) -> int:
    try:
        r = operator.index(value)
    except TypeError:
        raise TypeError(f"{op}: {arg} must be a positive int, got {type(value).__name__} ({value!r})") from None
    if r <= 0:
        raise ValueError(f"{op}: {arg} must be a positive int, got {r}")
    return r


def _check_rank(op: str, x: Tensor) -> None:
    if x.ndim < 3:
        raise ShapeError(f"{op}: expected an input of shape (*, C, H, W) with at least 3 dims, got shape "
                         f"{tuple(x.shape)}")


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:  # noqa: A002
    """(*, C * r * r, H, W) -> (*, C, H * r, W * r) with r = `upscale_factor` (sub-pixel convolution).

    >>> F.pixel_shuffle(kiln.randn(1, 9, 4, 4), 3).shape
    (1, 1, 12, 12)
    """
    r = _factor("pixel_shuffle", "upscale_factor", upscale_factor)
    _check_rank("pixel_shuffle", input)
    *batch, c, h, w = input.shape
    if c % (r * r):
        raise ShapeError(f"pixel_shuffle: the channel dim (-3) must be divisible by upscale_factor**2 = {r * r}, "
                         f"got input of shape {tuple(input.shape)}")
    b = len(batch)
    x = reshape(input, (*batch, c // (r * r), r, r, h, w))
    x = permute(x, (*range(b), b, b + 3, b + 1, b + 4, b + 2))
    return reshape(x, (*batch, c // (r * r), h * r, w * r))


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:  # noqa: A002
    """(*, C, H * r, W * r) -> (*, C * r * r, H, W) with r = `downscale_factor`: undoes pixel_shuffle.

    >>> F.pixel_unshuffle(kiln.randn(1, 1, 12, 12), 3).shape
    (1, 9, 4, 4)
    """
    r = _factor("pixel_unshuffle", "downscale_factor", downscale_factor)
    _check_rank("pixel_unshuffle", input)
    *batch, c, h, w = input.shape
    if h % r or w % r:
        raise ShapeError(f"pixel_unshuffle: height and width must be divisible by downscale_factor = {r}, got "
                         f"input of shape {tuple(input.shape)}")
    b = len(batch)
    x = reshape(input, (*batch, c, h // r, r, w // r, r))
    x = permute(x, (*range(b), b, b + 2, b + 4, b + 1, b + 3))
    return reshape(x, (*batch, c * r * r, h // r, w // r))
