"""Sliding-window primitives: unfold2d (im2col) and its adjoint fold2d (col2im).

conv2d is unfold2d + matmul, and max/avg pooling are reductions over unfold2d's
window axes, so the compiler sees ordinary matmuls and reductions.

Both take `batch_axis`, where the batch axis N sits among the column axes:
- 0: (N, C, kh, kw, OH, OW), one block of columns per image (pooling reduces it);
- 3: (C, kh, kw, N, OH, OW), the layout a convolution reshapes to (C*kh*kw, N*OH*OW), so
  that the whole batch is one GEMM in each direction, not one per image.
"""
from __future__ import annotations

import numpy as np

from .elementwise import F
from .fold_native import fold2d_into
from .primitive import AbstractValue, Primitive, ShapeError


def window_out_size(size: int, k: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def _out_hw(op: str, shape: tuple, kernel: tuple, stride: tuple, padding: tuple, dilation: tuple) -> tuple:
    if len(shape) != 4:
        raise ShapeError(f"{op}: expected a 4-D (N, C, H, W) input, got shape {tuple(shape)}")
    oh = window_out_size(shape[2], kernel[0], stride[0], padding[0], dilation[0])
    ow = window_out_size(shape[3], kernel[1], stride[1], padding[1], dilation[1])
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"{op}: a {kernel[0]}x{kernel[1]} window (dilation {dilation}, padding "
                         f"{padding}) does not fit the input of shape {tuple(shape)}")
    return oh, ow


BATCH_AXES = (0, 3)


def batch_last(axes: tuple, batch_axis: int) -> tuple:
    """The canonical (N, C, kh, kw, OH, OW) `axes` (sizes or strides) with N moved to `batch_axis`."""
    if batch_axis not in BATCH_AXES:
        raise ValueError(f"unfold2d/fold2d: batch_axis must be one of {BATCH_AXES}, got {batch_axis!r}")
    return axes if batch_axis == 0 else (axes[1], axes[2], axes[3], axes[0], axes[4], axes[5])


def batch_first(axes: tuple, batch_axis: int) -> tuple:
    """The inverse of batch_last: columns' `axes` in the canonical (N, C, kh, kw, OH, OW) order."""
    return axes if batch_axis == 0 else (axes[3], axes[0], axes[1], axes[2], axes[4], axes[5])


class Unfold2d(Primitive):
    """(N, C, H, W) -> (N, C, kh, kw, OH, OW) (or, with batch_axis=3, (C, kh, kw, N, OH, OW)):
    every window position, padded with pad_value."""

    name = "unfold2d"

    def abstract(self, x, *, kernel, stride, padding, dilation, pad_value, batch_axis=0):
        oh, ow = _out_hw(self.name, x.shape, kernel, stride, padding, dilation)
        shape = (x.shape[0], x.shape[1], kernel[0], kernel[1], oh, ow)
        return AbstractValue(batch_last(shape, batch_axis), x.dtype)

    def kernel(self, xp, x, *, kernel, stride, padding, dilation, pad_value, batch_axis=0):
        oh, ow = _out_hw(self.name, x.shape, kernel, stride, padding, dilation)
        ph, pw = padding
        if ph or pw:
            x = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), mode="constant", constant_values=pad_value)
        sn, sc, sh, sw = x.strides
        shape = (x.shape[0], x.shape[1], kernel[0], kernel[1], oh, ow)
        strides = (sn, sc, dilation[0] * sh, dilation[1] * sw, stride[0] * sh, stride[1] * sw)
        read_only = {"writeable": False} if xp is np else {}  # CuPy's as_strided has no such flag
        return xp.lib.stride_tricks.as_strided(x, shape=batch_last(shape, batch_axis),
                                               strides=batch_last(strides, batch_axis), **read_only)

    def vjp(self, g, inputs, node, *, kernel, stride, padding, dilation, pad_value, batch_axis=0):
        x = inputs[0]
        return (F().fold2d(g, x.shape[2:], kernel, stride, padding, dilation, batch_axis),)


class Fold2d(Primitive):
    """The adjoint of unfold2d: sum window columns (laid out as `batch_axis` says) back into an
    (N, C, H, W) image."""

    name = "fold2d"

    def abstract(self, cols, *, size, kernel, stride, padding, dilation, batch_axis=0):
        n, c = batch_first(tuple(cols.shape), batch_axis)[:2]
        return AbstractValue((n, c, size[0], size[1]), cols.dtype)

    def kernel(self, xp, cols, *, size, kernel, stride, padding, dilation, batch_axis=0):
        if batch_axis:
            cols = xp.moveaxis(cols, batch_axis, 0)  # a view: the sums below run in the same order
        n, c, kh, kw, oh, ow = cols.shape
        ph, pw = padding
        shape = (n, c, size[0] + 2 * ph, size[1] + 2 * pw)
        if xp is np:
            out = xp.empty(shape, dtype=cols.dtype)
            if fold2d_into(out, cols, stride, dilation):  # the same additions, in C (it writes every element)
                return out[:, :, ph:ph + size[0], pw:pw + size[1]]
        out = xp.zeros(shape, dtype=cols.dtype)
        sh, sw = stride
        for i in range(kh):
            top = i * dilation[0]
            for j in range(kw):
                left = j * dilation[1]
                out[:, :, top:top + sh * (oh - 1) + 1:sh, left:left + sw * (ow - 1) + 1:sw] += cols[:, :, i, j]
        return out[:, :, ph:ph + size[0], pw:pw + size[1]]

    def vjp(self, g, inputs, node, *, size, kernel, stride, padding, dilation, batch_axis=0):
        return (F().unfold2d(g, kernel, stride, padding, dilation, 0.0, batch_axis),)
