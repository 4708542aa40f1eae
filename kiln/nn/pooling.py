"""2-D pooling layers: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d."""
from __future__ import annotations

from typing import Any

from .. import functional as F
from ..tensor import Tensor
from .module import Module


class MaxPool2d(Module):
    """Max over k x k windows; stride defaults to the kernel size."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        if return_indices or ceil_mode:
            raise NotImplementedError("MaxPool2d: return_indices and ceil_mode are not supported yet")
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """Mean over k x k windows; stride defaults to the kernel size."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> None:
        super().__init__()
        if ceil_mode:
            raise NotImplementedError("AvgPool2d: ceil_mode is not supported yet")
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Average-pool (N, C, H, W) to a fixed (oh, ow); None keeps that input size."""

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        size = self.output_size
        if isinstance(size, (tuple, list)):  # None entries keep the input's size
            size = tuple(input.shape[-2 + i] if s is None else s for i, s in enumerate(size))
        return F.adaptive_avg_pool2d(input, size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
