"""BatchNorm1d and BatchNorm2d: batch statistics while training, running statistics in eval.

`_NormBase` holds what they share with the InstanceNorm layers (kiln/nn/instancenorm.py).
"""
from __future__ import annotations

from typing import Any

from .. import autograd
from .. import functional as F
from ..functional.creation import full, ones, zeros
from ..ops.primitive import ShapeError
from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter


class _NormBase(Module):
    """Shared parameters, buffers and repr of the BatchNorm and InstanceNorm layers.

    Buffers (as in PyTorch), with ``track_running_stats``: ``running_mean`` (zeros),
    ``running_var`` (ones) and ``num_batches_tracked`` (int64 scalar); with ``affine``:
    ``weight`` (ones) and ``bias`` (zeros).
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device: Any = None,
                 dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dtype, device=device))
            if bias:
                self.bias = Parameter(zeros(num_features, dtype=dtype, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=device))
            self.register_buffer("running_var", ones(num_features, dtype=dtype, device=device))
            self.register_buffer("num_batches_tracked", full((), 0, dtype="int64", device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            with autograd.no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    """Shared forward of the BatchNorm layers.

    Training updates the running stats in place:
    ``running = (1 - momentum) * running + momentum * batch_stat`` (the unbiased
    variance), or a cumulative average when ``momentum=None`` (which reads
    ``num_batches_tracked`` as a Python number: a data-dependent value under kiln.compile).
    """

    _expected_ndims: tuple[int, ...] = ()

    def _check_input(self, x: Tensor) -> None:
        if x.ndim not in self._expected_ndims:
            wanted = " or ".join(f"{d}D" for d in self._expected_ndims)
            raise ShapeError(f"{type(self).__name__}: expected {wanted} input (got {x.ndim}D input of shape "
                             f"{tuple(x.shape)})")
        if x.shape[1] != self.num_features:
            raise ShapeError(f"{type(self).__name__}: expected {self.num_features} channels in dim 1, got "
                             f"input of shape {tuple(x.shape)}")

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        self._check_input(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with autograd.no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        keep_stats = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if keep_stats else None,
                            self.running_var if keep_stats else None, self.weight, self.bias,
                            use_batch_stats, factor, self.eps)


class BatchNorm1d(_BatchNorm):
    """Batch norm over (N, C) or (N, C, L) input."""

    _expected_ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch norm over (N, C, H, W) input, per channel.

    >>> bn = kiln.nn.BatchNorm2d(16); bn(kiln.randn(8, 16, 5, 5)).shape
    (8, 16, 5, 5)
    """

    _expected_ndims = (4,)
