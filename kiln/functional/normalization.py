"""Group normalization and RMS normalization, composed from reductions and elementwise ops."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..ops.primitive import ShapeError
from ..sizes import is_int
from ..tensor import Tensor
from .math import add, mean, mul, rsqrt, sub
from .shape import reshape


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None,  # noqa: A002
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize (N, C, *) over each group of C // num_groups channels (and all spatial dims).

    The statistics are per sample and group (biased variance); `weight` and `bias` (C,)
    then scale and shift each channel.

    >>> kiln.nn.functional.group_norm(kiln.randn(2, 6, 4, 4), 3).shape
    (2, 6, 4, 4)
    """
    if input.ndim < 2:
        raise ShapeError(f"group_norm: expected an input of at least 2 dims (N, C, *), got shape "
                         f"{tuple(input.shape)}")
    n, c = input.shape[0], input.shape[1]
    if not is_int(num_groups) or num_groups <= 0 or c % num_groups:
        raise ValueError(f"group_norm: the {c} channels of input shape {tuple(input.shape)} must split into "
                         f"num_groups={num_groups!r} equal groups")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != (c,):
            raise ShapeError(f"group_norm: {name} must have shape ({c},) (one value per channel), got "
                             f"{tuple(p.shape)}")
    grouped = reshape(input, (n, num_groups, -1))
    mu = mean(grouped, -1, True)
    centered = sub(grouped, mu)
    var = mean(mul(centered, centered), -1, True)
    out = reshape(mul(centered, rsqrt(add(var, eps))), tuple(input.shape))
    channel = (1, c) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = mul(out, reshape(weight, channel))
    if bias is not None:
        out = add(out, reshape(bias, channel))
    return out


def _machine_eps(np_dtype: Any) -> float:
    """The distance from 1.0 to the next float of the dtype (ml_dtypes' finfo for bfloat16 and kin)."""
    try:
        return float(np.finfo(np_dtype).eps)
    except (TypeError, ValueError):
        import ml_dtypes  # noqa: PLC0415 - only the extension dtypes come from ml_dtypes

        return float(ml_dtypes.finfo(np_dtype).eps)


def rms_norm(input: Tensor, normalized_shape: Any, weight: Tensor | None = None,  # noqa: A002
             eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the trailing `normalized_shape` dims.

    `eps` defaults to the machine epsilon of the input's dtype, as in PyTorch.

    >>> kiln.nn.functional.rms_norm(kiln.randn(2, 5, 8), (8,)).shape
    (2, 5, 8)
    """
    shape = (normalized_shape,) if is_int(normalized_shape) else tuple(normalized_shape)
    if not shape or tuple(input.shape[input.ndim - len(shape):]) != shape or len(shape) > input.ndim:
        raise ShapeError(f"rms_norm: normalized_shape {shape} does not match the trailing dims of input "
                         f"shape {tuple(input.shape)}")
    if weight is not None and tuple(weight.shape) != shape:
        raise ShapeError(f"rms_norm: weight must have shape {shape} (normalized_shape), got {tuple(weight.shape)}")
    if not input.dtype.is_floating_point:
        raise TypeError(f"rms_norm: expected a floating-point input, got {input.dtype.name}")
    if eps is None:
        eps = _machine_eps(input.dtype.np)
    axes = tuple(range(input.ndim - len(shape), input.ndim))
    out = mul(input, rsqrt(add(mean(mul(input, input), axes, True), eps)))
    return mul(out, weight) if weight is not None else out
