"""LayerNorm, GroupNorm and RMSNorm: normalization layers with learnable per-feature scales."""
from __future__ import annotations

from typing import Any, Sequence

from .. import functional as F
from ..functional.normalization import group_norm, rms_norm
from ..functional.creation import ones, zeros
from ..ops.primitive import ShapeError
from ..sizes import is_int
from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter


def _affine_parameters(module: Module, shape: tuple, affine: bool, bias: bool, dtype: Any, device: Any) -> None:
    """`weight` (ones) and `bias` (zeros) of `shape` when `affine`, else both registered as None."""
    if affine:
        module.weight = Parameter(ones(*shape, dtype=dtype, device=device))
    else:
        module.register_parameter("weight", None)
    if affine and bias:
        module.bias = Parameter(zeros(*shape, dtype=dtype, device=device))
    else:
        module.register_parameter("bias", None)


def _reset_affine(module: Module) -> None:
    if module.weight is not None:
        init.ones_(module.weight)
    if module.bias is not None:
        init.zeros_(module.bias)


class LayerNorm(Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last len(normalized_shape) dims.

    >>> kiln.nn.LayerNorm(64)(kiln.randn(2, 10, 64)).shape
    (2, 10, 64)
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        if is_int(normalized_shape):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _affine_parameters(self, self.normalized_shape, elementwise_affine, bias, dtype, device)

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class GroupNorm(Module):
    """Normalize (N, C, *) over groups of C // num_groups channels, then scale and shift per channel.

    ``affine=False`` drops both per-channel parameters; ``bias=False`` only the shift.

    >>> kiln.nn.GroupNorm(4, 16)(kiln.randn(2, 16, 8, 8)).shape
    (2, 16, 8, 8)
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device: Any = None, dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__()
        if not is_int(num_groups) or not is_int(num_channels) or num_groups <= 0 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels!r}) must be divisible by num_groups "
                             f"({num_groups!r}), both positive ints")
        self.num_groups = int(num_groups)
        self.num_channels = int(num_channels)
        self.eps = eps
        self.affine = affine
        _affine_parameters(self, (self.num_channels,), affine, bias, dtype, device)

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        if input.ndim < 2 or input.shape[1] != self.num_channels:
            raise ShapeError(f"GroupNorm: expected an input (N, {self.num_channels}, *), got shape "
                             f"{tuple(input.shape)}")
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """x / sqrt(mean(x^2) + eps) * weight over the trailing `normalized_shape` dims (no centering, no bias).

    `eps=None` uses the machine epsilon of the input's dtype, as in PyTorch.

    >>> kiln.nn.RMSNorm(64)(kiln.randn(2, 10, 64)).shape
    (2, 10, 64)
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if is_int(normalized_shape):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(d) for d in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(*self.normalized_shape, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
