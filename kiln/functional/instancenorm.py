"""``F.instance_norm``: normalize each sample's channels over their spatial dims."""
from __future__ import annotations

import math

from .. import autograd
from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .math import add, mean, mul, rsqrt, sub
from .shape import reshape


def instance_norm(input: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,  # noqa: A002
                  weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Instance normalization of (N, C, *spatial) input: every (sample, channel) pair over its spatial dims.

    With `use_input_stats` (the default) each instance's own mean and biased variance are used,
    and `running_mean`/`running_var`, when given, move by `momentum` towards the batch average
    of the instance means and unbiased variances (in place). Otherwise the running stats
    normalize. `weight` and `bias` (C,) scale and shift each channel.

    >>> F.instance_norm(kiln.randn(2, 3, 8, 8)).shape
    (2, 3, 8, 8)
    """
    if input.ndim < 2:
        raise ShapeError(f"instance_norm: expected an (N, C, ...) input with at least 2 dims, got shape "
                         f"{tuple(input.shape)}")
    n, c = input.shape[0], input.shape[1]
    axes = tuple(range(2, input.ndim))
    bshape = (1, c) + (1,) * len(axes)
    if use_input_stats:
        count = math.prod(input.shape[2:])
        if count <= 1:
            raise ValueError(f"instance_norm: expected more than 1 spatial element when training, got input of "
                             f"shape {tuple(input.shape)}. Fix: normalize an input with spatial dims, or use "
                             "the running stats (use_input_stats=False, or eval() with track_running_stats)")
        mu = mean(input, axes, True)
        centered = sub(input, mu)
        var = mean(mul(centered, centered), axes, True)
        _update_running(running_mean, running_var, mu, var, (n, c), momentum, count)
        out = mul(centered, rsqrt(add(var, eps)))
    else:
        if running_mean is None or running_var is None:
            raise ValueError("instance_norm: running_mean and running_var are needed when use_input_stats=False; "
                             "pass both, or use_input_stats=True")
        out = mul(sub(input, reshape(running_mean, bshape)), rsqrt(add(reshape(running_var, bshape), eps)))
    if weight is not None:
        out = mul(out, reshape(weight, bshape))
    if bias is not None:
        out = add(out, reshape(bias, bshape))
    return out


def _update_running(running_mean: Tensor | None, running_var: Tensor | None, mu: Tensor, var: Tensor,
                    nc: tuple, momentum: float, count: int) -> None:
    """Move the running stats towards the batch average of the instance stats, in place."""
    with autograd.no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mul(mean(reshape(mu, nc), 0), momentum))
        if running_var is not None:
            unbiased = mul(mean(reshape(var, nc), 0), count / (count - 1))
            running_var.mul_(1 - momentum).add_(mul(unbiased, momentum))
