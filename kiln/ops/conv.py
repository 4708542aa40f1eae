"""The conv2d primitive: a 2-D convolution (cross-correlation) of one group, without bias.

``conv2d(x, w)`` takes an (N, C, H, W) image and an (O, C, kh, kw) weight and gives the
C-ordered (N, O, OH, OW) result, as PyTorch does; `kiln.functional.conv2d` adds the bias and
handles groups.

The forward pass never builds im2col columns where the contraction library is available (a C
compiler; float32 or float64 on the CPU). Elsewhere (no compiler, CuPy arrays, other dtypes) it
is one GEMM over unfold2d's columns. The gradients are the same products as ever: the weight's
is ``g^T @ columns^T`` (one GEMM over the batch), the image's ``fold2d(w^T @ g^T)``.
"""
from __future__ import annotations

import numpy as np

from .conv_native import conv2d_direct
from .elementwise import F
from .primitive import REGISTRY, AbstractValue, Primitive, ShapeError
from .window import _out_hw


def _check(x: AbstractValue, w: AbstractValue) -> None:
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise ShapeError(f"conv2d: expected a 4-D (N, C, H, W) input and an (O, C, kh, kw) weight, got shapes "
                         f"{tuple(x.shape)} and {tuple(w.shape)}")
    if x.shape[1] != w.shape[1]:
        raise ShapeError(f"conv2d: the input has {x.shape[1]} channels but the weight of shape {tuple(w.shape)} "
                         f"expects {w.shape[1]}")
    if x.dtype is not w.dtype:
        raise TypeError(f"conv2d: input and weight must share a dtype, got {x.dtype.name} and {w.dtype.name}")


class Conv2d(Primitive):
    """(N, C, H, W) image, (O, C, kh, kw) weight -> (N, O, OH, OW), zero padding."""

    name = "conv2d"
    saves_inputs = (0, 1)

    def abstract(self, x, w, *, stride, padding, dilation):
        _check(x, w)
        oh, ow = _out_hw(self.name, x.shape, tuple(w.shape[2:]), stride, padding, dilation)
        return AbstractValue((x.shape[0], w.shape[0], oh, ow), x.dtype)

    def kernel(self, xp, x, w, *, stride, padding, dilation):
        kernel = tuple(w.shape[2:])
        oh, ow = _out_hw(self.name, x.shape, kernel, stride, padding, dilation)
        if xp is np:
            out = conv2d_direct(x, w, stride, padding, dilation, (oh, ow))
            if out is not None:
                return out
        # no contraction library: one GEMM over the columns, (O, K) @ (K, N*OH*OW), moved to (N, O, OH, OW)
        n, o = x.shape[0], w.shape[0]
        cols = REGISTRY["unfold2d"].kernel(xp, x, kernel=kernel, stride=stride, padding=padding,
                                           dilation=dilation, pad_value=0.0, batch_axis=3)
        k = cols.shape[0] * cols.shape[1] * cols.shape[2]
        out = REGISTRY["matmul"].kernel(xp, w.reshape(o, k), cols.reshape(k, n * oh * ow))
        return xp.ascontiguousarray(out.reshape(o, n, oh, ow).transpose(1, 0, 2, 3))

    def vjp(self, g, inputs, node, *, stride, padding, dilation):
        x, w = inputs
        f = F()
        n, c, h, wd = x.shape
        o, _, kh, kw = w.shape
        k = c * kh * kw
        oh, ow = g.shape[2], g.shape[3]
        rows = f.reshape(f.permute(g, (1, 0, 2, 3)), (o, -1))  # (O, N*OH*OW)
        gx = gw = None
        if w.requires_grad:
            cols = f.unfold2d(x, (kh, kw), stride, padding, dilation, 0.0, 3)
            gw = f.reshape(f.matmul(rows, f.transpose(f.reshape(cols, (k, -1)), 0, 1)), tuple(w.shape))
        if x.requires_grad:
            dcols = f.matmul(f.transpose(f.reshape(w, (o, k)), 0, 1), rows)  # (K, N*OH*OW)
            gx = f.fold2d(f.reshape(dcols, (c, kh, kw, n, oh, ow)), (h, wd), (kh, kw), stride, padding, dilation, 3)
        return gx, gw
