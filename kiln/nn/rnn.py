"""RNN, LSTM and GRU: multi-layer, optionally bidirectional recurrent layers with PyTorch's names.

Parameters are named as in PyTorch (``weight_ih_l{k}``, ``weight_hh_l{k}``, ``bias_ih_l{k}``,
``bias_hh_l{k}``, ``weight_hr_l{k}`` for a projected LSTM, with ``_reverse`` for the
backward direction) and have the same shapes, so state dicts load either way.
"""
from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

from .. import functional as F
from ..functional.creation import empty, zeros
from ..functional.recurrent import input_projection, recurrent_step, scan
from ..functional.shape import cat, index_select, narrow, squeeze, stack, transpose, unbind, unsqueeze
from ..ops.primitive import ShapeError
from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter
from .utils.rnn import PackedSequence

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


class RNNBase(Module):
    """The shared machinery of RNN, LSTM and GRU: parameters, init, checks and the layer loop."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        name = type(self).__name__
        for what, value in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name}: {what} must be a positive int, got {value!r}")
        if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool)
                or not 0 <= dropout <= 1):
            raise ValueError(f"{name}: dropout must be a number in [0, 1] (the probability of an element "
                             f"being zeroed), got {dropout!r}")
        if not isinstance(proj_size, numbers.Integral) or proj_size < 0:
            raise ValueError(f"{name}: proj_size must be a non-negative int, got {proj_size!r}")
        if proj_size and mode != "LSTM":
            raise ValueError(f"{name}: proj_size is only supported by LSTM, got proj_size={proj_size}")
        if proj_size >= hidden_size:
            raise ValueError(f"{name}: proj_size ({proj_size}) has to be smaller than hidden_size "
                             f"({hidden_size})")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"{name}: dropout={dropout} is applied between recurrent layers, so it has no "
                          f"effect with num_layers=1; use num_layers > 1 or apply nn.Dropout to the output",
                          UserWarning, stacklevel=3)
        self.mode = mode
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.num_layers = int(num_layers)
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = int(proj_size)
        gate_size = _GATES[mode] * self.hidden_size
        out_size = self.proj_size or self.hidden_size
        directions = 2 if bidirectional else 1
        factory = {"dtype": dtype, "device": device}
        self._flat_weights_names: list[str] = []
        self._all_weights: list[list[str]] = []
        for layer in range(self.num_layers):
            layer_input = self.input_size if layer == 0 else out_size * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes = {f"weight_ih{suffix}": (gate_size, layer_input), f"weight_hh{suffix}": (gate_size, out_size)}
                if bias:
                    shapes[f"bias_ih{suffix}"] = (gate_size,)
                    shapes[f"bias_hh{suffix}"] = (gate_size,)
                if self.proj_size:
                    shapes[f"weight_hr{suffix}"] = (self.proj_size, self.hidden_size)
                for pname, shape in shapes.items():
                    setattr(self, pname, Parameter(empty(*shape, **factory)))
                self._flat_weights_names.extend(shapes)
                self._all_weights.append(list(shapes))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as in PyTorch."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def flatten_parameters(self) -> None:
        """Does nothing: kiln keeps no fused weight buffer (accepted so PyTorch code runs)."""

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """The parameters grouped per layer and direction, as PyTorch lists them."""
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    @property
    def _flat_weights(self) -> list[Parameter]:
        return [getattr(self, n) for n in self._flat_weights_names]

    # ---- forward ------------------------------------------------------------------------------
    def _state_sizes(self) -> list[int]:
        """The feature size of each state component: (h,) or, for the LSTM, (h, c)."""
        out = self.proj_size or self.hidden_size
        return [out, self.hidden_size] if self.mode == "LSTM" else [out]

    def _initial_state(self, hx: Any, batch: int, batched: bool, like: Tensor,
                       sorted_indices: Tensor | None) -> list[Tensor]:
        name = type(self).__name__
        rows = self.num_layers * (2 if self.bidirectional else 1)
        sizes = self._state_sizes()
        if hx is None:
            return [zeros(rows, batch, n, dtype=like.dtype, device=like.device) for n in sizes]
        parts = list(hx) if self.mode == "LSTM" else [hx]
        if self.mode == "LSTM" and (not isinstance(hx, (tuple, list)) or len(parts) != 2):
            raise TypeError(f"{name}: hx must be a tuple (h_0, c_0) of tensors, got {type(hx).__name__}")
        states = []
        for part, n, label in zip(parts, sizes, ("h_0", "c_0")):
            if not isinstance(part, Tensor):
                raise TypeError(f"{name}: {label} must be a kiln tensor, got {type(part).__name__}")
            expected = (rows, batch, n) if batched else (rows, n)
            if tuple(part.shape) != expected:
                raise ShapeError(f"{name}: expected {label} of shape {expected} (num_layers * num_directions, "
                                 + ("batch, " if batched else "") + f"hidden), got {tuple(part.shape)}")
            if part.dtype != like.dtype:
                raise TypeError(f"{name}: {label} is {part.dtype.name} but the input is {like.dtype.name}; "
                                f"convert one of them so they match")
            if not batched:
                part = unsqueeze(part, 1)
            if sorted_indices is not None:
                part = index_select(part, 1, sorted_indices)
            states.append(part)
        return states

    def _check_input(self, x: Tensor) -> None:
        name = type(self).__name__
        if not isinstance(x, Tensor):
            raise TypeError(f"{name}: expected a kiln tensor or a PackedSequence as input, got {type(x).__name__}")
        if x.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: input has {x.shape[-1]} features (shape {tuple(x.shape)}) but the "
                             f"layer expects input_size={self.input_size}")
        weight = self.weight_ih_l0
        if x.dtype != weight.dtype:
            raise TypeError(f"{name}: input is {x.dtype.name} but the weights are {weight.dtype.name}; convert "
                            f"the input (x.to('{weight.dtype.name}')) or the module (.to('{x.dtype.name}'))")

    def forward(self, input: Tensor | PackedSequence, hx: Any = None) -> tuple[Any, Any]:  # noqa: A002
        packed = isinstance(input, PackedSequence)
        if packed:
            x, batch_sizes = input.data, list(input.sizes)
            sorted_indices, unsorted_indices = input.sorted_indices, input.unsorted_indices
            self._check_input(x)
            if x.ndim != 2:
                raise ShapeError(f"{type(self).__name__}: a packed input's data must be 2-D (rows, input_size), "
                                 f"got shape {tuple(x.shape)}")
            batch, batched = batch_sizes[0], True
        else:
            self._check_input(input)
            if input.ndim not in (2, 3):
                raise ShapeError(f"{type(self).__name__}: expected a 2-D (unbatched: L, H_in) or 3-D input, got "
                                 f"shape {tuple(input.shape)}")
            if input.shape[0] == 0 or (input.ndim == 3 and input.shape[1] == 0):
                raise ShapeError(f"{type(self).__name__}: the input has no time steps or an empty batch (shape "
                                 f"{tuple(input.shape)})")
            batched = input.ndim == 3
            batch_sizes = sorted_indices = unsorted_indices = None
            x = input if batched else unsqueeze(input, 1)
            if batched and self.batch_first:
                x = transpose(x, 0, 1)
            batch = int(x.shape[1])
        states = self._initial_state(hx, batch, batched, x, sorted_indices)
        output, finals = self._run_layers(x, states, batch_sizes)
        if unsorted_indices is not None:
            finals = [index_select(s, 1, unsorted_indices) for s in finals]
        if not batched:
            finals = [squeeze(s, 1) for s in finals]
        hidden = tuple(finals) if self.mode == "LSTM" else finals[0]
        if packed:
            return PackedSequence(output, sorted_indices=sorted_indices, unsorted_indices=unsorted_indices,
                                  sizes=input.sizes), hidden
        if not batched:
            output = squeeze(output, 1)
        elif self.batch_first:
            output = transpose(output, 0, 1)
        return output, hidden

    def _run_layers(self, x: Tensor, states: list[Tensor], batch_sizes: list[int] | None
                    ) -> tuple[Tensor, list[Tensor]]:
        """All layers and directions over `x`: (T, B, F), or (rows, F) packed with `batch_sizes`."""
        directions = 2 if self.bidirectional else 1
        initial = [unbind(s, 0) for s in states]
        finals: list[list[Tensor]] = [[] for _ in states]
        offsets = None
        if batch_sizes is not None:
            offsets = [0]
            for size in batch_sizes[:-1]:
                offsets.append(offsets[-1] + size)
        layer_input = x
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                names = self._all_weights[layer * directions + direction]
                w = {n.split("_l")[0]: getattr(self, n) for n in names}
                xw = input_projection(self.mode, layer_input, w["weight_ih"], w.get("bias_ih"), w.get("bias_hh"))
                if batch_sizes is None:
                    steps = unbind(xw, 0)
                else:
                    steps = tuple(narrow(xw, 0, off, size) for off, size in zip(offsets, batch_sizes))
                step = recurrent_step(self.mode, w["weight_hh"], w.get("bias_hh"), w.get("weight_hr"))
                start = tuple(part[layer * directions + direction] for part in initial)
                outs, final = scan(step, steps, start, batch_sizes, reverse=direction == 1)
                outputs.append(stack(outs, 0) if batch_sizes is None else cat(outs, 0))
                for k, s in enumerate(final):
                    finals[k].append(s)
            layer_input = outputs[0] if directions == 1 else cat(outputs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, True)
        return layer_input, [stack(f, 0) for f in finals]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or ReLU), per layer.

    forward(input, h_0=None) returns (output, h_n): output (L, N, D * hidden_size) holds the
    last layer's h for every step (batch first with ``batch_first=True``; a PackedSequence in,
    a PackedSequence out); h_n (num_layers * D, N, hidden_size) is each layer's final state.

    >>> rnn = kiln.nn.RNN(10, 20, num_layers=2, batch_first=True)
    >>> out, h = rnn(kiln.randn(3, 5, 10)); out.shape, h.shape
    ((3, 5, 20), (2, 3, 20))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: Any = None, dtype: Any = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: unknown nonlinearity {nonlinearity!r}; select 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size,
                         num_layers, bias, batch_first, dropout, bidirectional, 0, device, dtype)

    def extra_repr(self) -> str:
        s = super().extra_repr()
        return s + (", nonlinearity='relu'" if self.nonlinearity == "relu" else "")


class LSTM(RNNBase):
    """Long short-term memory, gates (i, f, g, o) as in PyTorch; optional output projection.

    forward(input, (h_0, c_0)=None) returns (output, (h_n, c_n)). With ``proj_size > 0``
    each step's h is projected by ``weight_hr_l{k}`` to proj_size features.

    >>> lstm = kiln.nn.LSTM(10, 20, bidirectional=True)
    >>> out, (h, c) = lstm(kiln.randn(5, 3, 10)); out.shape, h.shape
    ((5, 3, 40), (2, 3, 20))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device: Any = None, dtype: Any = None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


class GRU(RNNBase):
    """Gated recurrent unit, gates (r, z, n) as in PyTorch: n = tanh(W_in x + b_in + r * (W_hn h + b_hn)).

    forward(input, h_0=None) returns (output, h_n), shaped as for `RNN`.

    >>> out, h = kiln.nn.GRU(10, 20)(kiln.randn(5, 3, 10)); h.shape
    (1, 3, 20)
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         0, device, dtype)
