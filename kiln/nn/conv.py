"""Conv1d, Conv2d, ConvTranspose1d and ConvTranspose2d layers.

Conv1d and Conv2d pad with zeros (``padding_mode="zeros"``, also for 'same' with even kernels)
or, as PyTorch does, pad the input first with ``F.pad`` in mode "reflect", "replicate" or
"circular" and then convolve without padding. Transposed convolutions take only "zeros".
"""
from __future__ import annotations

import math
from typing import Any

from .. import functional as F
from ..functional.conv_transpose import conv_transpose1d, conv_transpose2d, conv_transpose_output_size
from ..functional.creation import empty
from ..functional.padding import pad as _mode_pad
from ..functional.shape import pad as _pad
from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter


PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _ntuple(value: Any, n: int, name: str) -> tuple[int, ...]:
    if isinstance(value, (tuple, list)):
        if len(value) != n:
            raise ValueError(f"{name} must be an int or a tuple of {n} ints, got {value!r}")
        return tuple(int(v) for v in value)
    return (int(value),) * n


class _ConvNd(Module):
    """Shared parameters, init, padding logic and repr of the convolution layers."""

    _dims: int = 2
    _transposed: bool = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        n = self._dims
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"in_channels ({in_channels}) and out_channels ({out_channels}) must both be "
                             f"divisible by groups ({groups})")
        if padding_mode not in PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {', '.join(map(repr, PADDING_MODES))}, but got "
                             f"padding_mode={padding_mode!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _ntuple(kernel_size, n, "kernel_size")
        self.stride = _ntuple(stride, n, "stride")
        self.dilation = _ntuple(dilation, n, "dilation")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"invalid padding string {padding!r}; expected 'same', 'valid' or ints")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError("padding='same' is not supported for strided convolutions; use stride=1 "
                                 "or explicit padding")
            self.padding: Any = padding
        else:
            self.padding = _ntuple(padding, n, "padding")
        self.output_padding = (0,) * n
        self.transposed = self._transposed
        self.groups = groups
        self.padding_mode = padding_mode
        self._reversed_padding_repeated_twice = self._mode_pads()
        # a transposed conv's weight is (in, out / groups, *kernel), a conv's (out, in / groups, *kernel)
        channels = (in_channels, out_channels // groups) if self._transposed else (out_channels, in_channels // groups)
        self.weight = Parameter(empty(*channels, *self.kernel_size, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            init._fan_in_uniform_(self.bias, fan_in)

    def _mode_pads(self) -> list[int]:
        """The ``F.pad`` pads (last dim first, a (before, after) pair per dim) that `padding` stands for.

        A non-"zeros" `padding_mode` pads the input by these before convolving; for 'same' the
        extra element of an odd total goes after, as PyTorch does.
        """
        n = self._dims
        if self.padding == "valid":
            return [0, 0] * n
        if self.padding == "same":
            pads: list[int] = []
            for d, k in zip(reversed(self.dilation), reversed(self.kernel_size)):
                total = d * (k - 1)
                pads += [total // 2, total - total // 2]
            return pads
        return [p for p in reversed(self.padding) for _ in range(2)]

    def _resolve_padding(self, x: Tensor) -> tuple[Tensor, Any]:
        """The (possibly pre-padded) input and the symmetric padding to pass to the functional op.

        padding='same' with an even total padding puts the extra element on the right, as PyTorch does.
        A `padding_mode` other than "zeros" pads the input with ``F.pad`` in that mode, then passes 0.
        """
        if self.padding_mode != "zeros":
            return _mode_pad(x, self._reversed_padding_repeated_twice, mode=self.padding_mode), 0
        if self.padding == "valid":
            return x, 0
        if self.padding != "same":
            return x, self.padding
        totals = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
        if all(t % 2 == 0 for t in totals):
            return x, tuple(t // 2 for t in totals)
        pads: list[int] = []
        for t in reversed(totals):  # F.pad lists the last dim first
            pads += [t // 2, t - t // 2]
        return _pad(x, pads), 0

    def extra_repr(self) -> str:
        n = self._dims
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv2d(_ConvNd):
    """2-D convolution over (N, C, H, W) or (C, H, W) input.

    `padding` (ints, 'same' or 'valid') is filled with zeros, or with ``padding_mode`` "reflect",
    "replicate" or "circular" the input is first padded by ``F.pad`` in that mode.

    >>> kiln.nn.Conv2d(3, 8, 3, padding=1, padding_mode="reflect")(kiln.randn(2, 3, 8, 8)).shape
    (2, 8, 8, 8)
    >>> kiln.nn.Conv2d(1, 6, 5)(kiln.randn(8, 1, 32, 32)).shape
    (8, 6, 28, 28)
    """

    _dims = 2

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        x, padding = self._resolve_padding(input)
        return F.conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class Conv1d(_ConvNd):
    """1-D convolution over (N, C, L) or (C, L) input.

    ``padding_mode`` ("zeros", "reflect", "replicate" or "circular") says how `padding` is filled,
    as for Conv2d.

    >>> kiln.nn.Conv1d(2, 4, 3, padding="same", padding_mode="circular")(kiln.randn(5, 2, 9)).shape
    (5, 4, 9)
    """

    _dims = 1

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        x, padding = self._resolve_padding(input)
        pad1 = padding[0] if isinstance(padding, tuple) else padding
        return F.conv1d(x, self.weight, self.bias, self.stride[0], pad1, self.dilation[0], self.groups)


class _ConvTransposeNd(_ConvNd):
    """Shared constructor and output-size logic of the transposed convolutions."""

    _transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, output_padding: Any = 0, groups: int = 1, bias: bool = True,
                 dilation: Any = 1, padding_mode: str = "zeros", device: Any = None, dtype: Any = None) -> None:
        name = type(self).__name__
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {name}, got padding_mode={padding_mode!r}')
        if isinstance(padding, str):
            raise ValueError(f"{name}: padding must be an int or a tuple of ints, got {padding!r} (string "
                             f"paddings are not supported by transposed convolutions)")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)
        self.output_padding = _ntuple(output_padding, self._dims, "output_padding")
        for op, s, d in zip(self.output_padding, self.stride, self.dilation):
            if not 0 <= op < max(s, d):
                raise ValueError(f"{name}: output_padding must be smaller than either stride or dilation, got "
                                 f"output_padding={self.output_padding}, stride={self.stride}, "
                                 f"dilation={self.dilation}")

    def _output_padding(self, input: Tensor, output_size: Any) -> tuple[int, ...]:  # noqa: A002
        """The output_padding that gives `output_size` (this layer's own when None)."""
        if output_size is None:
            return self.output_padding
        n = self._dims
        wanted = [int(v) for v in (output_size if isinstance(output_size, (tuple, list)) else (output_size,) * n)]
        wanted = wanted[-n:]
        if len(wanted) != n:
            raise ValueError(f"{type(self).__name__}: output_size must have {n} spatial sizes (optionally "
                             f"after N and C), got {output_size!r}")
        spatial = input.shape[input.ndim - n:]
        padding = []
        for i in range(n):
            smallest = conv_transpose_output_size(int(spatial[i]), self.kernel_size[i], self.stride[i],
                                                  self.padding[i], 0, self.dilation[i])
            largest = smallest + self.stride[i] - 1
            if not smallest <= wanted[i] <= largest:
                raise ValueError(f"{type(self).__name__}: requested an output size of {wanted}, but the valid "
                                 f"sizes for dim {i} of input shape {tuple(input.shape)} are {smallest} to "
                                 f"{largest}")
            padding.append(wanted[i] - smallest)
        return tuple(padding)


class ConvTranspose2d(_ConvTransposeNd):
    """2-D transposed convolution (a "deconvolution") over (N, C, H, W) or (C, H, W) input.

    The weight is (in_channels, out_channels / groups, kh, kw), as in PyTorch. The output is
    (H - 1) * stride - 2 * padding + dilation * (kernel_size - 1) + output_padding + 1 high
    (likewise wide); ``forward(x, output_size=...)`` picks output_padding for a wanted size.

    >>> kiln.nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1)(kiln.randn(2, 16, 7, 7)).shape
    (2, 8, 14, 14)
    """

    _dims = 2

    def forward(self, input: Tensor, output_size: Any = None) -> Tensor:  # noqa: A002
        return conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                self._output_padding(input, output_size), self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """1-D transposed convolution over (N, C, L) or (C, L) input; weight (in, out / groups, k)."""

    _dims = 1

    def forward(self, input: Tensor, output_size: Any = None) -> Tensor:  # noqa: A002
        return conv_transpose1d(input, self.weight, self.bias, self.stride[0], self.padding[0],
                                self._output_padding(input, output_size)[0], self.groups, self.dilation[0])
