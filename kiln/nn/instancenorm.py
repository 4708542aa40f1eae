"""InstanceNorm1d, InstanceNorm2d and InstanceNorm3d: per-sample, per-channel normalization."""
from __future__ import annotations

import warnings
from typing import Any

from ..functional.instancenorm import instance_norm
from ..functional.shape import squeeze, unsqueeze
from ..tensor import Tensor
from .batchnorm import _NormBase


class _InstanceNorm(_NormBase):
    """Shared forward of the InstanceNorm layers: no affine parameters and no running stats by default.

    In training mode, or always without ``track_running_stats``, each instance is normalized by
    its own statistics; with ``track_running_stats`` the running stats are updated then (a
    ``momentum`` of None leaves them as they are) and used in eval mode. An unbatched input
    (no N dim) is accepted too.
    """

    _spatial_dims = 2

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device: Any = None, dtype: Any = None, *,
                 bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)

    def _check_input(self, input: Tensor) -> None:  # noqa: A002
        unbatched = self._spatial_dims + 1
        if input.ndim not in (unbatched, unbatched + 1):
            raise ValueError(f"{type(self).__name__}: expected {unbatched}D (unbatched) or {unbatched + 1}D input, "
                             f"got {input.ndim}D input of shape {tuple(input.shape)}")
        channels = input.shape[input.ndim - unbatched]
        if channels == self.num_features:
            return
        if self.affine:
            raise ValueError(f"{type(self).__name__}: expected {self.num_features} channels in dim "
                             f"{input.ndim - unbatched} (num_features), got input of shape {tuple(input.shape)}")
        warnings.warn(f"{type(self).__name__}: the input has {channels} channels but num_features is "
                      f"{self.num_features}; num_features is not used because affine=False", stacklevel=3)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        self._check_input(input)
        unbatched = input.ndim == self._spatial_dims + 1
        x = unsqueeze(input, 0) if unbatched else input
        momentum = self.momentum if self.momentum is not None else 0.0
        out = instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats, momentum, self.eps)
        return squeeze(out, 0) if unbatched else out


class InstanceNorm1d(_InstanceNorm):
    """Instance norm over (N, C, L) or (C, L) input."""

    _spatial_dims = 1


class InstanceNorm2d(_InstanceNorm):
    """Instance norm over (N, C, H, W) or (C, H, W) input (style transfer's normalization).

    >>> kiln.nn.InstanceNorm2d(3)(kiln.randn(2, 3, 8, 8)).shape
    (2, 3, 8, 8)
    """

    _spatial_dims = 2


class InstanceNorm3d(_InstanceNorm):
    """Instance norm over (N, C, D, H, W) or (C, D, H, W) input."""

    _spatial_dims = 3
