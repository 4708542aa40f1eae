"""Recurrent cells (Elman RNN, LSTM, GRU) and the time loop that runs them over a sequence.

The cell functions take PyTorch's weight layout: `w_ih` is (gates * hidden, input),
`w_hh` is (gates * hidden, hidden), with LSTM gates ordered (i, f, g, o) and GRU gates
(r, z, n). Everything is composed from differentiable kiln ops, so autograd and the
compiler (which unrolls the loop while tracing) see ordinary matmuls and elementwise ops.

A layer projects the whole input sequence through `w_ih` in one matmul up front; each
time step then needs only the small `h @ w_hh^T` matmul and the gate arithmetic.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..tensor import Tensor
from .lstm_fast import fast_lstm_gates
from .math import add, matmul, mul, relu, rsub, sigmoid, tanh
from .shape import cat, chunk, contiguous, narrow, transpose

State = tuple[Tensor, ...]  # (h,) for RNN/GRU, (h, c) for LSTM


def _project(x: Tensor, w: Tensor, *biases: Tensor | None) -> Tensor:
    """x @ w^T plus every bias that is not None."""
    out = matmul(x, transpose(w, 0, 1))
    for b in biases:
        if b is not None:
            out = add(out, b)
    return out


def rnn_tanh_cell(input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor,  # noqa: A002
                  b_ih: Tensor | None = None, b_hh: Tensor | None = None) -> Tensor:
    """One Elman RNN step: h' = tanh(x w_ih^T + b_ih + h w_hh^T + b_hh)."""
    return tanh(add(_project(input, w_ih, b_ih), _project(hx, w_hh, b_hh)))


def rnn_relu_cell(input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor,  # noqa: A002
                  b_ih: Tensor | None = None, b_hh: Tensor | None = None) -> Tensor:
    """One Elman RNN step with ReLU: h' = relu(x w_ih^T + b_ih + h w_hh^T + b_hh)."""
    return relu(add(_project(input, w_ih, b_ih), _project(hx, w_hh, b_hh)))


def _lstm_gates(gates: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """(h', c') from the summed pre-activations (i, f, g, o) and the old cell state."""
    fused = fast_lstm_gates(gates, c)  # eagerly, the same arithmetic as three autograd nodes
    if fused is not None:
        return fused
    i, f, g, o = chunk(gates, 4, -1)
    c_new = add(mul(sigmoid(f), c), mul(sigmoid(i), tanh(g)))
    return mul(sigmoid(o), tanh(c_new)), c_new


def lstm_cell(input: Tensor, hx: Sequence[Tensor], w_ih: Tensor, w_hh: Tensor,  # noqa: A002
              b_ih: Tensor | None = None, b_hh: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """One LSTM step; `hx` is (h, c). Returns (h', c')."""
    h, c = hx
    return _lstm_gates(add(_project(input, w_ih, b_ih), _project(h, w_hh, b_hh)), c)


def _gru_gates(xg: Tensor, hg: Tensor, h: Tensor) -> Tensor:
    """h' from the input part xg = x w_ih^T + b_ih and the hidden part hg = h w_hh^T + b_hh.

    n = tanh(x_n + r * (W_hn h + b_hn)): the reset gate scales the hidden part, bias included.
    """
    xr, xz, xn = chunk(xg, 3, -1)
    hr, hz, hn = chunk(hg, 3, -1)
    r = sigmoid(add(xr, hr))
    z = sigmoid(add(xz, hz))
    n = tanh(add(xn, mul(r, hn)))
    return add(mul(rsub(z, 1.0), n), mul(z, h))


def gru_cell(input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor,  # noqa: A002
             b_ih: Tensor | None = None, b_hh: Tensor | None = None) -> Tensor:
    """One GRU step (gates r, z, n as in PyTorch). Returns h'."""
    return _gru_gates(_project(input, w_ih, b_ih), _project(hx, w_hh, b_hh), hx)


# ---- one layer, one direction, over a whole sequence ----------------------------------------
Step = Callable[[Tensor, State], State]


def recurrent_step(mode: str, w_hh: Tensor, b_hh: Tensor | None, w_hr: Tensor | None = None) -> Step:
    """The per-step update of `mode` ('RNN_TANH', 'RNN_RELU', 'LSTM', 'GRU').

    It receives the step's precomputed input projection `xw` (see `input_projection`) and the
    state, and returns the new state. The transposed `w_hh` is made once, not once per step, as
    a contiguous copy: BLAS runs the small per-step product ``h @ w_hh^T`` faster on it than
    through a transposed view (67 against 97 us for a batch of 20 and 200 hidden units).
    """
    w_hh_t = contiguous(transpose(w_hh, 0, 1))
    if mode in ("RNN_TANH", "RNN_RELU"):
        act = tanh if mode == "RNN_TANH" else relu

        def rnn_step(xw: Tensor, state: State) -> State:
            return (act(add(xw, matmul(state[0], w_hh_t))),)
        return rnn_step
    if mode == "LSTM":
        w_hr_t = transpose(w_hr, 0, 1) if w_hr is not None else None

        def lstm_step(xw: Tensor, state: State) -> State:
            h, c = _lstm_gates(add(xw, matmul(state[0], w_hh_t)), state[1])
            return (matmul(h, w_hr_t) if w_hr_t is not None else h), c
        return lstm_step
    if mode == "GRU":
        def gru_step(xw: Tensor, state: State) -> State:
            hg = matmul(state[0], w_hh_t)
            return (_gru_gates(xw, add(hg, b_hh) if b_hh is not None else hg, state[0]),)
        return gru_step
    raise ValueError(f"unknown recurrent mode {mode!r}; expected 'RNN_TANH', 'RNN_RELU', 'LSTM' or 'GRU'")


def input_projection(mode: str, x: Tensor, w_ih: Tensor, b_ih: Tensor | None, b_hh: Tensor | None) -> Tensor:
    """x @ w_ih^T + biases for every time step at once.

    b_hh joins here except for the GRU, whose reset gate multiplies the hidden bias.
    """
    return _project(x, w_ih, b_ih) if mode == "GRU" else _project(x, w_ih, b_ih, b_hh)


def scan(step: Step, inputs: Sequence[Tensor], state: State, batch_sizes: Sequence[int] | None = None,
         reverse: bool = False) -> tuple[list[Tensor], State]:
    """Run `step` over `inputs` (one (B_t, G) tensor per time step) from `state` (each (B, H)).

    Returns the per-step outputs (h of each step, in time order) and the final state.
    With `batch_sizes` (a packed sequence: B_t rows active at step t, a non-increasing
    count), only the first B_t rows of the state advance at step t; the others keep their
    value, so each sequence's final state is taken at its own last step (its first step
    when `reverse`).
    """
    steps = range(len(inputs) - 1, -1, -1) if reverse else range(len(inputs))
    outputs: list[Tensor | None] = [None] * len(inputs)
    if batch_sizes is None:
        for t in steps:
            state = step(inputs[t], state)
            outputs[t] = state[0]
        return outputs, state  # type: ignore[return-value]
    initial = state
    total = int(state[0].shape[0])
    rows = int(batch_sizes[steps[0]])
    active = tuple(narrow(s, 0, 0, rows) for s in state) if rows < total else state
    reached = rows  # rows >= reached have not been active yet
    finished: list[State] = []  # rows that stopped advancing, the highest rows first
    for t in steps:
        size = int(batch_sizes[t])
        if size < rows:
            finished.append(tuple(narrow(s, 0, size, rows - size) for s in active))
            active = tuple(narrow(s, 0, 0, size) for s in active)
        elif size > rows:
            active = tuple(cat([a, narrow(s0, 0, rows, size - rows)]) for a, s0 in zip(active, initial))
        rows = size
        reached = max(reached, size)
        active = step(inputs[t], active)
        outputs[t] = active[0]
    if reached < total:  # rows that never became active keep their initial state
        finished.insert(0, tuple(narrow(s0, 0, reached, total - reached) for s0 in initial))
    if finished:
        active = tuple(cat([a] + [part[k] for part in reversed(finished)]) for k, a in enumerate(active))
    return outputs, active  # type: ignore[return-value]
