"""The convolution primitives: conv2d (one group, no bias) and its two gradients.

* ``conv2d(x, w)``: an (N, C, H, W) image and an (O, C, kh, kw) weight give the C-ordered
  (N, O, OH, OW) result, as PyTorch's; `kiln.functional.conv2d` adds the bias and handles groups.
* ``conv2d_weight_grad(x, g)``: the weight's gradient (O, C, kh, kw) from the image and the
  output's gradient g (N, O, OH, OW).
* ``conv2d_input_grad(g, w)``: the image's gradient (N, C, H, W).

Each is bilinear, so the three are each other's gradients (a second derivative stays in the
family). Where the contraction library is available (a C compiler; float32 or float64 NumPy
arrays), each is a register-tiled contraction read straight from a padded operand, with no
im2col columns (conv_native.py; a strided convolution's image gradient is one contraction per
phase of the stride). Elsewhere (no compiler, CuPy arrays, other dtypes) each is one GEMM over
unfold2d's columns of the whole batch, and col2im for the image's gradient.
"""
from __future__ import annotations

import numpy as np

from .conv_native import conv2d_direct, conv2d_input_grad_direct, conv2d_weight_grad_direct
from .primitive import REGISTRY, AbstractValue, Primitive, ShapeError, bind
from .window import _out_hw


def _columns(xp, x, kernel, stride, padding, dilation):
    """unfold2d's (C*kh*kw, N*OH*OW) columns of image `x`."""
    cols = REGISTRY["unfold2d"].kernel(xp, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                                       pad_value=0.0, batch_axis=3)
    c, kh, kw, n, oh, ow = cols.shape
    return cols.reshape(c * kh * kw, n * oh * ow)


def _rows(xp, g):
    """An (N, O, OH, OW) gradient as the (O, N*OH*OW) matrix the GEMMs take."""
    return xp.ascontiguousarray(g.transpose(1, 0, 2, 3)).reshape(g.shape[1], -1)


def _params(stride, padding, dilation) -> dict:
    return {"stride": tuple(stride), "padding": tuple(padding), "dilation": tuple(dilation)}


def _convolve(x, w, params: dict):
    """conv2d of image `x` with weight `w` (tensors), for the family's gradients."""
    return bind(REGISTRY["conv2d"], (x, w), params)


def image_grad(g, w, x_shape, params: dict):
    """conv2d_input_grad: the gradient of an image of `x_shape` from the output's gradient `g` (tensors;
    `params` the convolution's stride, padding and dilation as pairs)."""
    return bind(REGISTRY["conv2d_input_grad"], (g, w), {"size": tuple(x_shape[2:]), **params})


def weight_grad(x, g, w_shape, params: dict):
    """conv2d_weight_grad: the gradient of a weight of `w_shape` from the image `x` and the output's
    gradient `g` (tensors; `params` as for image_grad)."""
    return bind(REGISTRY["conv2d_weight_grad"], (x, g), {"kernel": tuple(w_shape[2:]), **params})


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
    result_layout = "c"
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
        n, o = x.shape[0], w.shape[0]
        cols = _columns(xp, x, kernel, stride, padding, dilation)
        out = REGISTRY["matmul"].kernel(xp, w.reshape(o, -1), cols)  # (O, N*OH*OW)
        return xp.ascontiguousarray(out.reshape(o, n, oh, ow).transpose(1, 0, 2, 3))

    def vjp(self, g, inputs, node, *, stride, padding, dilation):
        x, w = inputs
        params = _params(stride, padding, dilation)
        gx = image_grad(g, w, x.shape, params) if x.requires_grad else None
        gw = weight_grad(x, g, w.shape, params) if w.requires_grad else None
        return gx, gw


class Conv2dWeightGrad(Primitive):
    """(N, C, H, W) image, (N, O, OH, OW) output gradient -> the (O, C, kh, kw) weight gradient."""

    name = "conv2d_weight_grad"
    result_layout = "c"
    saves_inputs = (0, 1)

    def abstract(self, x, g, *, kernel, stride, padding, dilation):
        if len(x.shape) != 4 or len(g.shape) != 4 or x.shape[0] != g.shape[0]:
            raise ShapeError(f"conv2d_weight_grad: expected an (N, C, H, W) image and an (N, O, OH, OW) gradient, "
                             f"got shapes {tuple(x.shape)} and {tuple(g.shape)}")
        return AbstractValue((g.shape[1], x.shape[1], *kernel), x.dtype)

    def kernel(self, xp, x, g, *, kernel, stride, padding, dilation):
        if xp is np:
            out = conv2d_weight_grad_direct(x, g, kernel, stride, padding, dilation)
            if out is not None:
                return out
        cols = _columns(xp, x, kernel, stride, padding, dilation)
        out = REGISTRY["matmul"].kernel(xp, _rows(xp, g), cols.T)  # (O, C*kh*kw)
        return out.reshape(g.shape[1], x.shape[1], *kernel)

    def vjp(self, gw, inputs, node, *, kernel, stride, padding, dilation):
        x, g = inputs
        params = _params(stride, padding, dilation)
        gx = image_grad(g, gw, x.shape, params) if x.requires_grad else None
        gg = _convolve(x, gw, params) if g.requires_grad else None
        return gx, gg


class Conv2dInputGrad(Primitive):
    """(N, O, OH, OW) output gradient, (O, C, kh, kw) weight -> the (N, C, H, W) image gradient."""

    name = "conv2d_input_grad"
    result_layout = "c"
    saves_inputs = (0, 1)

    def abstract(self, g, w, *, size, stride, padding, dilation):
        if len(g.shape) != 4 or len(w.shape) != 4 or g.shape[1] != w.shape[0]:
            raise ShapeError(f"conv2d_input_grad: expected an (N, O, OH, OW) gradient and an (O, C, kh, kw) weight, "
                             f"got shapes {tuple(g.shape)} and {tuple(w.shape)}")
        return AbstractValue((g.shape[0], w.shape[1], *size), g.dtype)

    def kernel(self, xp, g, w, *, size, stride, padding, dilation):
        if xp is np:
            out = conv2d_input_grad_direct(g, w, size, stride, padding, dilation)
            if out is not None:
                return out
        n, o, oh, ow = g.shape
        _, c, kh, kw = w.shape
        dcols = REGISTRY["matmul"].kernel(xp, w.reshape(o, -1).T, _rows(xp, g))  # (C*kh*kw, N*OH*OW)
        return REGISTRY["fold2d"].kernel(xp, dcols.reshape(c, kh, kw, n, oh, ow), size=tuple(size),
                                         kernel=(kh, kw), stride=tuple(stride), padding=tuple(padding),
                                         dilation=tuple(dilation), batch_axis=3)

    def vjp(self, gx, inputs, node, *, size, stride, padding, dilation):
        g, w = inputs
        params = _params(stride, padding, dilation)
        gg = _convolve(gx, w, params) if g.requires_grad else None
        gw = weight_grad(gx, g, w.shape, params) if w.requires_grad else None
        return gg, gw
