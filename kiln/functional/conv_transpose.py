"""Transposed convolution (the gradient of conv2d with respect to its input), as matmul + fold2d."""
from __future__ import annotations

from typing import Any

from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .layers import _pair, fold2d
from .math import add, matmul
from .shape import pad, reshape, squeeze, transpose, unsqueeze


def conv_transpose_output_size(size: int, kernel: int, stride: int, padding: int, output_padding: int,
                               dilation: int) -> int:
    """(size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1."""
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,  # noqa: A002
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """2-D transposed convolution of (N, C_in, H, W) with a (C_in, C_out / groups, kh, kw) weight.

    Each input pixel scatters `weight` times its value into the output (stride apart); `padding`
    crops the result on every side and `output_padding` adds rows and columns at the bottom/right.

    >>> kiln.nn.functional.conv_transpose2d(kiln.randn(1, 4, 5, 5), kiln.randn(4, 2, 3, 3), stride=2).shape
    (1, 2, 11, 11)
    """
    if input.ndim == 3:
        return squeeze(conv_transpose2d(unsqueeze(input, 0), weight, bias, stride, padding, output_padding,
                                        groups, dilation), 0)
    if input.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"conv_transpose2d: expected a 4-D input (N, C, H, W) and a 4-D weight, got shapes "
                         f"{tuple(input.shape)} and {tuple(weight.shape)}")
    n, c_in, h, w = input.shape
    if groups <= 0 or c_in % groups or weight.shape[0] != c_in:
        raise ShapeError(f"conv_transpose2d: input with {c_in} channels and groups={groups} does not fit a "
                         f"weight of shape {tuple(weight.shape)} (expected weight.shape[0] == {c_in}, divisible "
                         f"by groups)")
    if input.dtype != weight.dtype:
        raise TypeError(f"conv_transpose2d: input is {input.dtype.name} but the weight is {weight.dtype.name}; "
                        f"convert one so they match")
    stride2, pad2 = _pair(stride, "stride"), _pair(padding, "padding")
    out_pad2, dil2 = _pair(output_padding, "output_padding"), _pair(dilation, "dilation")
    if any(s <= 0 for s in stride2) or any(d <= 0 for d in dil2) or any(p < 0 for p in pad2):
        raise ValueError(f"conv_transpose2d: stride and dilation must be positive and padding non-negative, got "
                         f"stride={stride2}, dilation={dil2}, padding={pad2}")
    for i in range(2):
        if not 0 <= out_pad2[i] < max(stride2[i], dil2[i]):
            raise ValueError(f"conv_transpose2d: output_padding must be smaller than either stride or dilation, "
                             f"got output_padding={out_pad2}, stride={stride2}, dilation={dil2}")
    c_out_g, kh, kw = weight.shape[1], weight.shape[2], weight.shape[3]
    c_in_g = c_in // groups
    out_h = conv_transpose_output_size(h, kh, stride2[0], pad2[0], out_pad2[0], dil2[0])
    out_w = conv_transpose_output_size(w, kw, stride2[1], pad2[1], out_pad2[1], dil2[1])
    if out_h <= 0 or out_w <= 0:
        raise ShapeError(f"conv_transpose2d: the output would be {out_h}x{out_w} for input {tuple(input.shape)}, "
                         f"kernel {(kh, kw)}, stride {stride2}, padding {pad2}; reduce the padding")
    # columns[n, g, (co, i, j), pixel] = sum over the group's input channels of weight * input
    w_g = transpose(reshape(weight, (groups, c_in_g, c_out_g * kh * kw)), 1, 2)
    cols = matmul(w_g, reshape(input, (n, groups, c_in_g, h * w)))
    cols = reshape(cols, (n, groups * c_out_g, kh, kw, h, w))
    # fold onto the uncropped output, then crop `padding` and add `output_padding` (pad takes negatives)
    full_h = conv_transpose_output_size(h, kh, stride2[0], 0, 0, dil2[0])
    full_w = conv_transpose_output_size(w, kw, stride2[1], 0, 0, dil2[1])
    out = fold2d(cols, (full_h, full_w), (kh, kw), stride2, (0, 0), dil2)
    out = pad(out, (-pad2[1], out_pad2[1] - pad2[1], -pad2[0], out_pad2[0] - pad2[0]))
    if bias is not None:
        out = add(out, reshape(bias, (1, groups * c_out_g, 1, 1)))
    return out


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int = 1,  # noqa: A002
                     padding: int = 0, output_padding: int = 0, groups: int = 1, dilation: int = 1) -> Tensor:
    """1-D transposed convolution of (N, C_in, L) with a (C_in, C_out / groups, k) weight."""
    if input.ndim == 2:
        return squeeze(conv_transpose1d(unsqueeze(input, 0), weight, bias, stride, padding, output_padding,
                                        groups, dilation), 0)
    if input.ndim != 3 or weight.ndim != 3:
        raise ShapeError(f"conv_transpose1d: expected a 3-D input (N, C, L) and a 3-D weight, got shapes "
                         f"{tuple(input.shape)} and {tuple(weight.shape)}")
    one = lambda v: int(v[0] if isinstance(v, (tuple, list)) else v)  # noqa: E731
    out = conv_transpose2d(unsqueeze(input, 2), unsqueeze(weight, 2), bias, (1, one(stride)), (0, one(padding)),
                           (0, one(output_padding)), groups, (1, one(dilation)))
    return squeeze(out, 2)
