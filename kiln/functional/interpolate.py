"""Resizing: `interpolate` with nearest and (bi/tri)linear modes, as gathers and a weighted sum.

Mode 'area' is adaptive average pooling (1-D and 2-D).

Each spatial axis is resized on its own: nearest picks one source index per output index,
linear picks two and mixes them with weights. Source indices follow PyTorch's formulas
(including ``align_corners`` and the scale used when ``scale_factor`` is given), so the
outputs match PyTorch's; the gradients flow through the gathers (scatter-adds).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ops.primitive import ShapeError
from ..sizes import is_int, is_real
from ..tensor import Tensor, tensor
from .math import add, mul
from .layers import adaptive_avg_pool2d
from .shape import index_select, squeeze, unsqueeze

_NEAREST = ("nearest", "nearest-exact")
_LINEAR = {"linear": 3, "bilinear": 4, "trilinear": 5}
_UNSUPPORTED = ("bicubic",)


def _per_axis(value: Any, dims: int, what: str) -> list:
    if isinstance(value, (tuple, list)):
        if len(value) != dims:
            raise ValueError(f"interpolate: {what} must be a number or a sequence of {dims} (one per spatial dim), "
                             f"got {value!r}")
        return list(value)
    return [value] * dims


def _output_sizes(input: Tensor, size: Any, scale_factor: Any, dims: int) -> tuple[list[int], list[Any]]:  # noqa: A002
    """(output size per spatial axis, the scale factors the source-index formulas use, or None each)."""
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor, got "
                         + ("both" if size is not None else "neither"))
    if size is not None:
        sizes = _per_axis(size, dims, "size")
        if not all(is_int(s) and s > 0 for s in sizes):
            raise ValueError(f"interpolate: size must hold positive ints, got {size!r}")
        return [int(s) for s in sizes], [None] * dims
    scales = _per_axis(scale_factor, dims, "scale_factor")
    if not all(is_real(s) and s > 0 for s in scales):
        raise ValueError(f"interpolate: scale_factor must hold positive numbers, got {scale_factor!r}")
    sizes = [math.floor(float(input.shape[2 + i]) * float(scales[i])) for i in range(dims)]
    if any(s <= 0 for s in sizes):
        raise ValueError(f"interpolate: scale_factor {scale_factor!r} shrinks input shape {tuple(input.shape)} to "
                         f"an empty output {sizes}")
    return sizes, [float(s) for s in scales]


def _nearest_source(in_size: int, out_size: int, scale: float | None, exact: bool) -> np.ndarray:
    """The source index of each output index (PyTorch computes the scale in float32)."""
    ratio = np.float32(1.0 / scale) if scale is not None else np.float32(in_size) / np.float32(out_size)
    dst = np.arange(out_size, dtype=np.float32)
    if exact:
        dst = dst + np.float32(0.5)
    src = np.floor(dst * ratio).astype(np.int64)
    return np.minimum(src, in_size - 1)


def _linear_source(in_size: int, out_size: int, scale: float | None, align_corners: bool,
                   np_dtype: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower index, upper index, weight of the upper one) per output index."""
    dtype = np.float64 if np_dtype == np.float64 else np.float32
    dst = np.arange(out_size, dtype=dtype)
    if align_corners:
        ratio = dtype((in_size - 1) / (out_size - 1)) if out_size > 1 else dtype(0)
        src = dst * ratio
    else:
        ratio = dtype(1.0 / scale) if scale is not None else dtype(in_size) / dtype(out_size)
        src = np.maximum((dst + dtype(0.5)) * ratio - dtype(0.5), dtype(0))
    low = np.floor(src).astype(np.int64)
    low = np.minimum(low, in_size - 1)
    high = np.where(low < in_size - 1, low + 1, low)
    lam = np.clip(src - low, 0, 1).astype(dtype)
    return low, high, lam


def _axis_weights(lam: np.ndarray, axis: int, ndim: int, like: Tensor) -> tuple[Tensor, Tensor]:
    shape = (len(lam),) + (1,) * (ndim - axis - 1)
    lam = lam.astype(like.dtype.np).reshape(shape)
    return (tensor(1 - lam, dtype=like.dtype, device=like.device), tensor(lam, dtype=like.dtype, device=like.device))


def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",  # noqa: A002
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resize the spatial dims of (N, C, *spatial) to `size`, or by `scale_factor`.

    Modes: 'nearest' and 'nearest-exact' (1-3 spatial dims), 'linear' (3-D input),
    'bilinear' (4-D), 'trilinear' (5-D), 'area' (adaptive average pooling, 3-D or 4-D). ``align_corners=True`` maps the corner pixels'
    centres onto each other; by default pixel areas are aligned. With `scale_factor`,
    the source positions use that factor unless ``recompute_scale_factor=True``.

    >>> kiln.nn.functional.interpolate(kiln.randn(1, 3, 8, 8), scale_factor=2, mode="bilinear").shape
    (1, 3, 16, 16)
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"interpolate: expected a kiln tensor, got {type(input).__name__}")
    if mode in _UNSUPPORTED:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported yet; use 'nearest', "
                                  f"'nearest-exact', 'linear', 'bilinear', 'trilinear' or 'area'")
    if mode not in _NEAREST and mode not in _LINEAR and mode != "area":
        raise ValueError(f"interpolate: unknown mode {mode!r}; expected one of 'nearest', 'nearest-exact', "
                         f"'linear', 'bilinear', 'trilinear', 'area'")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported yet; pass antialias=False")
    if input.ndim not in (3, 4, 5):
        raise ShapeError(f"interpolate: expected a 3-D, 4-D or 5-D input (N, C, *spatial), got shape "
                         f"{tuple(input.shape)}")
    if mode in _LINEAR and input.ndim != _LINEAR[mode]:
        raise ShapeError(f"interpolate: mode {mode!r} needs a {_LINEAR[mode]}-D input, got shape "
                         f"{tuple(input.shape)}; use " + ", ".join(f"{m!r} for {n}-D" for m, n in _LINEAR.items()))
    if mode == "area" and input.ndim == 5:
        raise NotImplementedError("interpolate: mode 'area' supports 3-D and 4-D inputs only so far")
    if mode not in _LINEAR and align_corners is not None:
        raise ValueError("interpolate: align_corners can only be set with the interpolating modes 'linear', "
                         "'bilinear' and 'trilinear'; leave it None for the other modes")
    if mode not in _NEAREST and not input.dtype.is_floating_point:
        raise TypeError(f"interpolate: mode {mode!r} needs a floating-point input, got {input.dtype.name}")
    dims = input.ndim - 2
    sizes, scales = _output_sizes(input, size, scale_factor, dims)
    if recompute_scale_factor:
        scales = [None] * dims
    if mode == "area":  # the average of each output cell's source window
        if dims == 1:
            return squeeze(adaptive_avg_pool2d(unsqueeze(input, 2), (1, sizes[0])), 2)
        return adaptive_avg_pool2d(input, tuple(sizes))
    out = input
    for i in range(dims):
        axis = 2 + i
        in_size, out_size = int(input.shape[axis]), sizes[i]
        if mode in _NEAREST:
            if out_size == in_size and mode == "nearest":
                continue
            src = _nearest_source(in_size, out_size, scales[i], mode == "nearest-exact")
            out = index_select(out, axis, tensor(src, device=input.device))
            continue
        low, high, lam = _linear_source(in_size, out_size, scales[i], bool(align_corners), input.dtype.np)
        w_low, w_high = _axis_weights(lam, axis, input.ndim, input)
        x_low = index_select(out, axis, tensor(low, device=input.device))
        x_high = index_select(out, axis, tensor(high, device=input.device))
        out = add(mul(x_low, w_low), mul(x_high, w_high))
    return out
