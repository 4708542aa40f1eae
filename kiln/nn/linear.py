"""Identity, Linear and Bilinear layers."""
from __future__ import annotations

import math
from typing import Any

from .. import functional as F
from ..functional.creation import empty
from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter


class Identity(Module):
    """Returns its input unchanged; accepts and ignores any constructor arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return input


class Linear(Module):
    """y = x W^T + b, with W of shape (out_features, in_features).

    Initialized as in PyTorch: W ~ kaiming_uniform(a=sqrt(5)), b ~ U(-1/sqrt(in), 1/sqrt(in)).

    >>> kiln.nn.Linear(784, 256)(kiln.randn(32, 784)).shape
    (32, 256)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            init._fan_in_uniform_(self.bias, self.in_features)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    """y[..., o] = x1 W[o] x2^T + b[o], with W of shape (out, in1, in2)."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.in1_features = in1_features
        self.in2_features = in2_features
        self.out_features = out_features
        self.weight = Parameter(empty(out_features, in1_features, in2_features, dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init._fan_in_uniform_(self.weight, self.in1_features)
        if self.bias is not None:
            init._fan_in_uniform_(self.bias, self.in1_features)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
