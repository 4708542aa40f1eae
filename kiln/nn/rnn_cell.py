"""RNNCell, LSTMCell and GRUCell: one recurrent step, for loops written by hand."""
from __future__ import annotations

import math
import numbers
from typing import Any

from ..functional.creation import empty, zeros
from ..functional.recurrent import gru_cell, lstm_cell, rnn_relu_cell, rnn_tanh_cell
from ..functional.shape import squeeze, unsqueeze
from ..ops.primitive import ShapeError
from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter


class RNNCellBase(Module):
    """Parameters (weight_ih, weight_hh, bias_ih, bias_hh), init and input checks of the cells."""

    _gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        name = type(self).__name__
        for what, value in (("input_size", input_size), ("hidden_size", hidden_size)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name}: {what} must be a positive int, got {value!r}")
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.bias = bias
        factory = {"dtype": dtype, "device": device}
        gate_size = self._gates * self.hidden_size
        self.weight_ih = Parameter(empty(gate_size, self.input_size, **factory))
        self.weight_hh = Parameter(empty(gate_size, self.hidden_size, **factory))
        if bias:
            self.bias_ih = Parameter(empty(gate_size, **factory))
            self.bias_hh = Parameter(empty(gate_size, **factory))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as in PyTorch."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _prepare(self, input: Tensor, hx: Tensor | None) -> tuple[Tensor, Tensor, bool]:  # noqa: A002
        """(input as (N, H_in), hx as (N, hidden), whether the input was batched)."""
        name = type(self).__name__
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}: expected a kiln tensor as input, got {type(input).__name__}")
        if input.ndim not in (1, 2):
            raise ShapeError(f"{name}: expected a 1-D (unbatched) or 2-D (N, input_size) input, got shape "
                             f"{tuple(input.shape)}")
        if input.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: input has {input.shape[-1]} features (shape {tuple(input.shape)}) but "
                             f"the cell expects input_size={self.input_size}")
        if input.dtype != self.weight_ih.dtype:
            raise TypeError(f"{name}: input is {input.dtype.name} but the weights are {self.weight_ih.dtype.name}; "
                            f"convert the input or the module so they match")
        batched = input.ndim == 2
        x = input if batched else unsqueeze(input, 0)
        if hx is None:
            return x, zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device), batched
        return x, self._check_state(hx, x, batched, "hx"), batched

    def _check_state(self, h: Any, x: Tensor, batched: bool, label: str) -> Tensor:
        name = type(self).__name__
        if not isinstance(h, Tensor):
            raise TypeError(f"{name}: {label} must be a kiln tensor, got {type(h).__name__}")
        expected = (x.shape[0], self.hidden_size) if batched else (self.hidden_size,)
        if tuple(h.shape) != tuple(expected):
            raise ShapeError(f"{name}: expected {label} of shape {tuple(expected)}, got {tuple(h.shape)}")
        if h.dtype != x.dtype:
            raise TypeError(f"{name}: {label} is {h.dtype.name} but the input is {x.dtype.name}")
        return h if batched else unsqueeze(h, 0)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        return s


class RNNCell(RNNCellBase):
    """One Elman step: h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or ReLU).

    >>> cell = kiln.nn.RNNCell(10, 20)
    >>> cell(kiln.randn(3, 10)).shape
    (3, 20)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device: Any = None, dtype: Any = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: unknown nonlinearity {nonlinearity!r}; select 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        x, h, batched = self._prepare(input, hx)
        cell = rnn_tanh_cell if self.nonlinearity == "tanh" else rnn_relu_cell
        out = cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return out if batched else squeeze(out, 0)

    def extra_repr(self) -> str:
        s = super().extra_repr()
        return s + (", nonlinearity=relu" if self.nonlinearity == "relu" else "")


class LSTMCell(RNNCellBase):
    """One LSTM step, gates (i, f, g, o). forward(input, (h, c)=None) returns (h', c').

    >>> h, c = kiln.nn.LSTMCell(10, 20)(kiln.randn(3, 10)); c.shape
    (3, 20)
    """

    _gates = 4

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:  # noqa: A002
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError(f"LSTMCell: hx must be a tuple (h, c) of tensors, got {type(hx).__name__}")
        x, h, batched = self._prepare(input, None if hx is None else hx[0])
        c = h if hx is None else self._check_state(hx[1], x, batched, "c")
        h, c = lstm_cell(x, (h, c), self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return (h, c) if batched else (squeeze(h, 0), squeeze(c, 0))


class GRUCell(RNNCellBase):
    """One GRU step, gates (r, z, n) with n = tanh(W_in x + b_in + r * (W_hn h + b_hn)).

    >>> kiln.nn.GRUCell(10, 20)(kiln.randn(3, 10)).shape
    (3, 20)
    """

    _gates = 3

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        x, h, batched = self._prepare(input, hx)
        out = gru_cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return out if batched else squeeze(out, 0)
