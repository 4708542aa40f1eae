"""Layer ops: linear, convolution, pooling, normalization, dropout, embedding, attention."""
from __future__ import annotations

import math as _math
from typing import Any, Sequence

from .. import autograd
from ..dtypes import DTypeMismatchError
from ..ops.primitive import REGISTRY, ShapeError, bind
from ..trace_state import trace_state
from ..ops.window import batch_first
from ..sizes import is_int
from ..tensor import Tensor
from .activations import softmax
from .checks import checked_index
from .creation import arange, ones, rand
from .math import (_as_tensor, add, amax, cast, div, eq, ge, logical_not, matmul, mean, mul, rsqrt, sub, sum,
                   where)
from .shape import (bind_index, clone, masked_fill, pad, permute, reshape, squeeze, swapaxes, transpose, tril,
                    unsqueeze)

_P = REGISTRY
_RESHAPE = REGISTRY["reshape"]


def _pair(v: Any, name: str) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"{name} must be an int or a pair, got {v!r}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _same_dtype(op: str, x: Any, weight: Tensor, bias: Tensor | None) -> Tensor:
    """`x` as a tensor, after checking that it, `weight` and `bias` share one dtype, as PyTorch requires.

    Promoting instead would silently turn a float32 model into float64 math (and float64
    gradients) whenever a float64 NumPy array comes in.
    """
    x = _as_tensor(x)
    w = weight.dtype.name
    if x.dtype != weight.dtype:
        raise DTypeMismatchError(
            f"{op}: the input is {x.dtype.name} but the weight is {w}; they must have the same dtype (as in "
            f"PyTorch, no promotion here). Fix: convert the input, x.to(kiln.{w}) (for a NumPy array, "
            f"kiln.tensor(array, dtype=kiln.{w})), or the module, model.to(kiln.{x.dtype.name})")
    if bias is not None and bias.dtype != weight.dtype:
        raise DTypeMismatchError(f"{op}: the bias is {bias.dtype.name} but the weight is {w}; they must have the "
                                 f"same dtype. Fix: bias.to(kiln.{w})")
    return x


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T + bias. The input, weight and bias must share a dtype (DTypeMismatchError otherwise).

    An input with more than two dims is flattened to (rows, features) first, so the forward
    product and both gradient products are each one GEMM rather than one per batch index.
    """
    x = _same_dtype("linear", x, weight, bias)
    if x.shape[-1] != weight.shape[-1]:
        raise ShapeError(f"linear: input has {x.shape[-1]} features (shape {tuple(x.shape)}) but the "
                         f"weight expects {weight.shape[-1]} (weight shape {tuple(weight.shape)})")
    lead = tuple(x.shape[:-1])
    flat = len(lead) > 1 and weight.ndim == 2 and weight.shape[1] != 0
    if flat:
        x = reshape(x, (-1, weight.shape[1]))
    out = matmul(x, transpose(weight, 0, 1))
    if bias is not None:
        out = add(out, bias)
    return reshape(out, lead + (weight.shape[0],)) if flat else out


def bilinear(x1: Tensor, x2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y[..., o] = x1 @ weight[o] @ x2 + bias[o]. Inputs, weight and bias must share a dtype."""
    from .math import einsum  # noqa: PLC0415

    x1 = _same_dtype("bilinear", x1, weight, bias)
    x2 = _same_dtype("bilinear", x2, weight, None)

    lead = x1.shape[:-1]
    a = reshape(x1, (-1, x1.shape[-1]))
    b = reshape(x2, (-1, x2.shape[-1]))
    tmp = einsum("ni,oij->noj", a, weight)
    out = sum(mul(tmp, unsqueeze(b, 1)), -1)
    if bias is not None:
        out = add(out, bias)
    return reshape(out, tuple(lead) + (weight.shape[0],))


def unfold2d(x: Tensor, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
             dilation: Sequence[int], pad_value: float = 0.0, batch_axis: int = 0) -> Tensor:
    """(N, C, H, W) -> (N, C, kh, kw, OH, OW) sliding windows (im2col); with batch_axis=3 the
    columns are laid out (C, kh, kw, N, OH, OW), a convolution's one-GEMM layout."""
    return bind(_P["unfold2d"], (x,), {"kernel": tuple(kernel), "stride": tuple(stride),
                                        "padding": tuple(padding), "dilation": tuple(dilation),
                                        "pad_value": float(pad_value), "batch_axis": int(batch_axis)})


def fold2d(cols: Tensor, size: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
           padding: Sequence[int], dilation: Sequence[int], batch_axis: int = 0) -> Tensor:
    """Sum window columns back into (N, C, H, W): the adjoint of unfold2d (of the same batch_axis)."""
    (h, w), (kh, kw) = tuple(size), tuple(kernel)
    windows = tuple((n + 2 * p - d * (k - 1) - 1) // st + 1
                    for n, k, st, p, d in zip((h, w), (kh, kw), stride, padding, dilation))
    plain = all(type(n) is int for n in (*cols.shape, h, w))  # symbolic sizes (dynamic_dims) are not checked here
    expected = "(N, C, {kh}, {kw}, {oh}, {ow})" if batch_axis == 0 else "(C, {kh}, {kw}, N, {oh}, {ow})"
    if plain and (len(cols.shape) != 6 or batch_first(tuple(cols.shape), batch_axis)[2:] != (kh, kw) + windows):
        raise ShapeError(f"fold2d: columns for a {h}x{w} image with kernel {(kh, kw)}, stride {tuple(stride)}, "
                         f"padding {tuple(padding)} and dilation {tuple(dilation)} must have shape "
                         f"{expected.format(kh=kh, kw=kw, oh=windows[0], ow=windows[1])}, got "
                         f"{tuple(cols.shape)}; pass the size, kernel, stride, padding, dilation and batch_axis "
                         "that unfold2d produced them with")
    return bind(_P["fold2d"], (cols,), {"size": tuple(size), "kernel": tuple(kernel), "stride": tuple(stride),
                                         "padding": tuple(padding), "dilation": tuple(dilation),
                                         "batch_axis": int(batch_axis)})


def _conv_padding(padding: Any, kernel: tuple[int, int], dilation: tuple[int, int]) -> tuple[int, int]:
    if padding == "valid":
        return (0, 0)
    if padding == "same":  # the even part; conv2d pads an odd total's extra 1 on the right/bottom
        total = [dilation[i] * (kernel[i] - 1) for i in range(2)]
        return (total[0] // 2, total[1] // 2)
    if isinstance(padding, str):
        raise ValueError(f"conv2d: padding must be 'valid', 'same', an int or a pair, got {padding!r}")
    return _pair(padding, "padding")


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D convolution (cross-correlation): the conv2d primitive with one group, im2col + matmul with several.
    x: (N, C, H, W), of the weight's dtype."""
    x = _same_dtype("conv2d", x, weight, bias)
    if x.ndim == 3:
        return squeeze(conv2d(unsqueeze(x, 0), weight, bias, stride, padding, dilation, groups), 0)
    if x.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"conv2d: expected a 4-D input and weight, got shapes {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    n, c, _, _ = x.shape
    out_c, c_per_group, kh, kw = weight.shape
    if c % groups or out_c % groups or c // groups != c_per_group:
        raise ShapeError(f"conv2d: input with {c} channels and groups={groups} does not fit a weight of "
                         f"shape {tuple(weight.shape)} (expected {c // max(groups, 1)} input channels per group)")
    stride2, dil2 = _pair(stride, "stride"), _pair(dilation, "dilation")
    pad2 = _conv_padding(padding, (kh, kw), dil2)
    if padding == "same" and (dil2[0] * (kh - 1) % 2 or dil2[1] * (kw - 1) % 2):
        # an even effective kernel: PyTorch puts the odd extra row/column at the bottom/right
        extra_h, extra_w = dil2[0] * (kh - 1) % 2, dil2[1] * (kw - 1) % 2
        x = pad(x, (pad2[1], pad2[1] + extra_w, pad2[0], pad2[0] + extra_h))
        pad2 = (0, 0)
    return _convolve(x, weight, bias, stride2, pad2, dil2, groups)


RECOMPUTE_COLUMNS_BYTES = 64 << 20  # eager convolution columns this large are remade in backward, not kept


def _convolve(x: Tensor, weight: Tensor, bias: Tensor | None, stride: tuple, padding: tuple,
               dilation: tuple, groups: int) -> Tensor:
    """conv2d over the whole batch: the conv2d primitive (one group), or im2col and one GEMM per group.

    One group: the conv2d primitive (kiln/ops/conv.py), which reads the windows where they lie
    (no im2col columns) and writes the C-ordered (N, O, OH, OW) result.

    Several groups: the columns are laid out (C*kh*kw, N*OH*OW) (unfold2d with batch_axis=3), so
    the product with each group's (O/g, C/g*kh*kw) weight gives its (O/g, N, OH, OW) output of every
    image at once. Eagerly, large columns (`RECOMPUTE_COLUMNS_BYTES` or more) are not kept for the
    weight gradient: the backward pass remakes them from the image (autograd.recompute_saved_input),
    so that a network's activations, not its columns, are what stays in memory between forward and
    backward.
    """
    n = x.shape[0]
    out_c, c_per_group, kh, kw = weight.shape
    if groups == 1:
        out = bind(_P["conv2d"], (x, weight), {"stride": tuple(stride), "padding": tuple(padding),
                                               "dilation": tuple(dilation)})
    else:
        cols = unfold2d(x, (kh, kw), stride, padding, dilation, 0.0, batch_axis=3)
        oh, ow = cols.shape[4], cols.shape[5]
        k = c_per_group * kh * kw
        shape = (groups, k, n * oh * ow)
        out = matmul(reshape(weight, (groups, out_c // groups, k)), reshape(cols, shape))
        if (out._node is not None and trace_state.tracer is None  # eager autograd: remake large columns in backward
                and cols._data.nbytes >= RECOMPUTE_COLUMNS_BYTES):
            autograd.recompute_saved_input(out, 1, lambda: _RESHAPE.kernel(cols._device.xp, cols._data, shape=shape),
                                           (x,))
        out = clone(permute(reshape(out, (out_c, n, oh, ow)), (1, 0, 2, 3)))
    if bias is not None:
        out = add(out, reshape(bias, (1, out_c, 1, 1)))
    return out


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int = 1, padding: Any = 0,
           dilation: int = 1, groups: int = 1) -> Tensor:
    """1-D convolution of (N, C, L) through conv2d on a height-1 image."""
    x = _same_dtype("conv1d", x, weight, bias)
    if x.ndim == 2:
        return squeeze(conv1d(unsqueeze(x, 0), weight, bias, stride, padding, dilation, groups), 0)
    pad1 = padding if isinstance(padding, str) else (0, int(padding if not isinstance(padding, (tuple, list)) else padding[0]))
    out = conv2d(unsqueeze(x, 2), unsqueeze(weight, 2), bias, (1, stride), pad1, (1, dilation), groups)
    return squeeze(out, 2)


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Tensor:
    """Max over each window (padding counts as -inf)."""
    if ceil_mode or return_indices:
        raise NotImplementedError("max_pool2d: ceil_mode and return_indices are not supported yet")
    if x.ndim == 3:
        return squeeze(max_pool2d(unsqueeze(x, 0), kernel_size, stride, padding, dilation), 0)
    k = _pair(kernel_size, "kernel_size")
    s = _pair(stride if stride is not None else k, "stride")
    p, d = _pair(padding, "padding"), _pair(dilation, "dilation")
    if any(p[i] > ((k[i] - 1) * d[i] + 1) // 2 for i in range(2)):  # else windows lie wholly in the padding
        raise ValueError(f"max_pool2d: padding {p} should be at most half of the effective kernel size "
                         f"(kernel_size={k}, dilation={d})")
    n, c, h, w = x.shape if x.ndim == 4 else (None,) * 4
    if (s == k and p == (0, 0) and d == (1, 1) and isinstance(h, int) and isinstance(w, int)
            and h % k[0] == 0 and w % k[1] == 0):
        # windows that tile the image: a reshape (a view) instead of unfold2d, so the gradient
        # is an elementwise mask on the input's own layout with no col2im sum
        tiles = reshape(x, (n, c, h // k[0], k[0], w // k[1], k[1]))
        return amax(tiles, (3, 5))
    cols = unfold2d(x, k, s, p, d, float("-inf"))
    return amax(cols, (2, 3))


def avg_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """Mean over each window."""
    if ceil_mode:
        raise NotImplementedError("avg_pool2d: ceil_mode is not supported yet")
    if x.ndim == 3:
        return squeeze(avg_pool2d(unsqueeze(x, 0), kernel_size, stride, padding, ceil_mode,
                                  count_include_pad, divisor_override), 0)
    k = _pair(kernel_size, "kernel_size")
    s = _pair(stride if stride is not None else k, "stride")
    p = _pair(padding, "padding")
    total = sum(unfold2d(x, k, s, p, (1, 1)), (2, 3))
    if divisor_override:
        return div(total, float(divisor_override))
    if count_include_pad or p == (0, 0):
        return div(total, float(k[0] * k[1]))
    with autograd.no_grad():
        counts = sum(unfold2d(ones(1, 1, x.shape[2], x.shape[3], dtype=x.dtype), k, s, p, (1, 1)), (2, 3))
    return div(total, counts)


def _adaptive_matrix(size: int, out: int, like: Tensor) -> Tensor:
    """(out, size) averaging matrix: row i averages input cells floor(i*size/out) .. ceil((i+1)*size/out)."""
    import numpy as np  # noqa: PLC0415

    m = np.zeros((out, size), dtype=like._data.dtype)
    for i in range(out):
        lo = (i * size) // out
        hi = -((-(i + 1) * size) // out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return Tensor._wrap(like._device.xp.asarray(m), like._device)


def adaptive_avg_pool2d(x: Tensor, output_size: Any) -> Tensor:
    """Average-pool to a fixed output size, as two small matmuls."""
    if isinstance(output_size, (tuple, list)):  # None entries keep the input size
        if len(output_size) != 2:
            raise ValueError(f"adaptive_avg_pool2d: output_size must be an int or a pair, got {output_size!r}")
        oh, ow = output_size
    else:
        oh = ow = output_size
    h, w = x.shape[-2], x.shape[-1]
    oh = h if oh is None else oh
    ow = w if ow is None else ow
    rows = _adaptive_matrix(h, oh, x)
    cols = _adaptive_matrix(w, ow, x)
    return matmul(matmul(rows, x), transpose(cols, 0, 1))


def dropout(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p) (training only)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return mul(x, 0.0)
    keep = ge(rand(*x.shape, dtype=x.dtype, device=x.device), p)
    return mul(mul(x, cast(keep, x.dtype)), 1.0 / (1.0 - p))


def layer_norm(x: Tensor, normalized_shape: Any, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing `normalized_shape` dims, then scale and shift."""
    shape = (normalized_shape,) if is_int(normalized_shape) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise ShapeError(f"layer_norm: normalized_shape {shape} does not match the trailing dims of "
                         f"input shape {tuple(x.shape)}")
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    mu = mean(x, axes, True)
    centered = sub(x, mu)
    v = mean(mul(centered, centered), axes, True)
    out = mul(centered, rsqrt(add(v, eps)))
    if weight is not None:
        out = mul(out, weight)
    if bias is not None:
        out = add(out, bias)
    return out


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalization over every dim but 1. Training updates the running stats in place."""
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: expected at least 2 dims (N, C, ...), got shape {tuple(x.shape)}")
    axes = (0,) + tuple(range(2, x.ndim))
    bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if training:
        count = x.numel() // x.shape[1]
        if count <= 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when training, "
                             f"got input of shape {tuple(x.shape)}")
        mu = mean(x, axes, True)
        centered = sub(x, mu)
        v = mean(mul(centered, centered), axes, True)
        if running_mean is not None and running_var is not None:
            with autograd.no_grad():
                unbiased = mul(reshape(v, (-1,)), count / (count - 1))
                running_mean.mul_(1 - momentum).add_(mul(reshape(mu, (-1,)), momentum))
                running_var.mul_(1 - momentum).add_(mul(unbiased, momentum))
        scale = rsqrt(add(v, eps))
        if weight is not None:  # one per-channel factor: the backward keeps `centered` and no normalized copy
            scale = mul(scale, reshape(weight, bshape))
        out = mul(centered, scale)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: running_mean and running_var are needed when training=False")
        out = mul(sub(x, reshape(running_mean, bshape)), rsqrt(add(reshape(running_var, bshape), eps)))
        if weight is not None:
            out = mul(out, reshape(weight, bshape))
    if bias is not None:
        out = add(out, reshape(bias, bshape))
    return out


def embedding(idx: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of `weight` picked by integer `idx` in [0, num_embeddings); the padding row gets no gradient.

    Negative or too large indices raise IndexError, as in PyTorch.
    """
    if idx._data.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got {idx.dtype.name}")
    idx = checked_index("embedding", idx, weight, None)
    if padding_idx is not None and weight.requires_grad:
        rows = unsqueeze(eq(arange(weight.shape[0], device=weight.device), padding_idx % weight.shape[0]), 1)
        weight = where(rows, weight.detach(), weight)
    spec = (("t",),)
    return bind_index(weight, (idx,), spec)


def one_hot(idx: Tensor, num_classes: int = -1) -> Tensor:
    """(..., ) int64 -> (..., num_classes) int64 with a 1 at each index."""
    if idx.dtype.is_floating_point:
        raise TypeError(f"one_hot: expected an integer tensor, got {idx.dtype.name}")
    if num_classes < 0:
        num_classes = int(idx.max().item()) + 1
    return cast(eq(unsqueeze(idx, -1), arange(num_classes, device=idx.device)), "int64")


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None) -> Tensor:
    """softmax(q k^T * scale + mask) v over the last two dims; is_causal masks the future."""
    if q.shape[-1] != k.shape[-1]:
        raise ShapeError(f"scaled_dot_product_attention: query dim {q.shape[-1]} != key dim {k.shape[-1]}")
    scale = 1.0 / _math.sqrt(q.shape[-1]) if scale is None else scale
    scores = mul(matmul(q, swapaxes(k, -2, -1)), scale)
    lq, lk = q.shape[-2], k.shape[-2]
    if is_causal:
        keep = tril(ones(lq, lk, dtype="bool", device=q.device))
        scores = masked_fill(scores, logical_not(keep), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype.name == "bool":
            scores = masked_fill(scores, logical_not(attn_mask), float("-inf"))
        else:
            scores = add(scores, attn_mask)
    attn = softmax(scores, -1)
    if dropout_p > 0.0:
        attn = dropout(attn, dropout_p, True)
    return matmul(attn, v)
