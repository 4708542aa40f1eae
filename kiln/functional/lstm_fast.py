"""Eager LSTM gate arithmetic as three autograd nodes instead of thirteen.

An LSTM step turns its summed pre-activations ``gates`` (i, f, g, o) and the old cell state
``c`` into ``c' = sigmoid(f) c + sigmoid(i) tanh(g)`` and ``h' = sigmoid(o) tanh(c')``:
written in primitives, a ``chunk``, three sigmoids, two tanhs, three products and a sum,
and about twenty VJP ops backward. A language model runs that 70 times a step (35 time
steps, 2 layers), and on its small (batch, hidden) tiles the per-op dispatch costs more
than the arithmetic.

Eagerly (no tracer, NumPy arrays, one float dtype, 2-D tiles), `fast_lstm_gates` runs the
same kernels on the arrays and records three nodes:

- ``acts`` = the four activations side by side, (sigmoid i, sigmoid f, tanh g, sigmoid o);
- ``c'`` from (acts, c);
- ``h'`` from (acts, c').

Their VJPs compute each decomposed VJP's array operation, so values and gradients are
bit-identical to the decomposed path: the two gradients that reach ``c'`` (from ``h'`` and
from the next step) are added by the autograd engine as before, and the gate gradients are
joined as the decomposed ``chunk``'s slice gradients are (one ``cat``). A tracer
(kiln.compile) always sees the decomposed primitives, which its backends fuse.

A backward that builds a graph (``create_graph=True``) or runs under a tracer writes the
same gradients in kiln ops: first-order gradients keep their bits, but a second-order
gradient through these nodes sums its contributions in another order than the
decomposed graph does, so it may differ from it in the last bits.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import autograd
from ..autograd import Node
from ..gradient_sum import SliceGradient, slice_of_dim
from ..ops.primitive import REGISTRY, Primitive, array_vjp
from ..trace_state import trace_state
from ..ops.quiet import quiet
from ..tensor import Tensor

_SIGMOID = REGISTRY["sigmoid"]
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _quarters(hidden: int) -> tuple[slice, slice, slice, slice]:
    return tuple(slice(k * hidden, (k + 1) * hidden) for k in range(4))  # type: ignore[return-value]


def _slice_gradient(g: Tensor, shape: tuple, start: int, stop: int) -> SliceGradient:
    """The gradient `g` of ``x[:, start:stop]`` for an `x` of 2-D `shape`, pending (the engine joins siblings)."""
    spec = (("s", None, None, None), ("s", start, stop, 1))
    where = slice_of_dim(spec, shape)
    assert where is not None
    return SliceGradient(g, spec, shape, where)


class _Activations(Primitive):
    """acts = (sigmoid i, sigmoid f, tanh g, sigmoid o) of the gates; not a registered primitive."""

    saves_output = True  # a double backward (create_graph) reads it

    def vjp(self, g: Tensor, inputs: tuple, node: Node, *, acts: Any) -> tuple:
        hidden = acts.shape[1] // 4
        qi, qf, qg, qo = _quarters(hidden)
        if not array_vjp(g):
            from . import math as f  # noqa: PLC0415 - cycle: kiln.functional imports this module
            from .shape import cat  # noqa: PLC0415

            y = node.output()
            grads = [f.mul(g[:, q], f.mul(y[:, q], f.rsub(y[:, q], 1.0))) for q in (qi, qf)]
            grads.append(f.mul(g[:, qg], f.rsub(f.mul(y[:, qg], y[:, qg]), 1.0)))
            grads.append(f.mul(g[:, qo], f.mul(y[:, qo], f.rsub(y[:, qo], 1.0))))
            return (cat(grads, 1),)
        return (Tensor._wrap(_activations_backward(g._data, acts, qi, qf, qg, qo), g._device),)


class _CellState(Primitive):
    """c' = sigmoid(f) c + sigmoid(i) tanh(g), from (acts, c); not a registered primitive."""

    saves_inputs = (0, 1)  # a double backward (create_graph) reads both

    def vjp(self, g: Tensor, inputs: tuple, node: Node, *, acts: Any) -> tuple:
        a, c = inputs
        hidden = acts.shape[1] // 4
        qi, qf, qg, _ = _quarters(hidden)
        if not array_vjp(g):
            from . import math as f  # noqa: PLC0415
            from .shape import cat  # noqa: PLC0415

            si, sf, tg = a[:, qi], a[:, qf], a[:, qg]
            ga = cat([f.mul(g, tg), f.mul(g, c), f.mul(g, si)], 1)
            return _slice_gradient(ga, tuple(acts.shape), 0, 3 * hidden), f.mul(g, sf)
        ga, gc = _cell_state_backward(g._data, c._data, acts, qi, qf, qg)
        dev = g._device
        return _slice_gradient(Tensor._wrap(ga, dev), tuple(acts.shape), 0, 3 * hidden), Tensor._wrap(gc, dev)


class _Hidden(Primitive):
    """h' = sigmoid(o) tanh(c'), from (acts, c'); not a registered primitive."""

    saves_inputs = (0, 1)  # a double backward (create_graph) reads both

    def vjp(self, g: Tensor, inputs: tuple, node: Node, *, acts: Any, tc: Any) -> tuple:
        hidden = acts.shape[1] // 4
        qo = _quarters(hidden)[3]
        if not array_vjp(g):
            from . import math as f  # noqa: PLC0415

            a, c_new = inputs
            t = f.tanh(c_new)
            g_so, g_tc = f.mul(g, t), f.mul(g, a[:, qo])
            return _slice_gradient(g_so, tuple(acts.shape), 3 * hidden, 4 * hidden), \
                f.mul(g_tc, f.rsub(f.mul(t, t), 1.0))
        g_so, g_c = _hidden_backward(g._data, acts[:, qo], tc)
        dev = g._device
        return _slice_gradient(Tensor._wrap(g_so, dev), tuple(acts.shape), 3 * hidden, 4 * hidden), \
            Tensor._wrap(g_c, dev)


def _node_prim(cls: type, name: str) -> Primitive:
    """The one instance of `cls`, given its name after the class is made: a class that names itself
    is registered as a primitive, which these nodes are not (tracers never see them)."""
    prim = cls()
    prim.name = name
    return prim


_ACTIVATIONS = _node_prim(_Activations, "lstm_activations")
_CELL_STATE = _node_prim(_CellState, "lstm_cell_state")
_HIDDEN = _node_prim(_Hidden, "lstm_hidden")


def fast_lstm_gates(gates: Tensor, c: Tensor) -> tuple[Tensor, Tensor] | None:
    """(h', c') from the pre-activations and the old cell state as three nodes, or None when the
    case does not allow it (see the module doc): the caller then runs the decomposed ops."""
    if trace_state.tracer is not None or type(gates) is not Tensor or type(c) is not Tensor:
        return None
    x, cd = gates._data, c._data
    if (type(x) is not np.ndarray or type(cd) is not np.ndarray or x.ndim != 2 or x.dtype not in _FLOATS
            or cd.dtype != x.dtype or x.shape[1] % 4 or cd.shape != (x.shape[0], x.shape[1] // 4)
            or gates._device is not c._device):
        return None
    acts_data, c_data, tc, h_data = _forward(x, cd)
    dev = gates._device
    acts = Tensor._wrap(acts_data, dev)
    c_new, h = Tensor._wrap(c_data, dev), Tensor._wrap(h_data, dev)
    if autograd.is_grad_enabled():
        if gates.requires_grad:
            acts.requires_grad = True
            acts._node = Node(_ACTIVATIONS, (gates,), {"acts": acts_data}, acts)
        if acts.requires_grad or c.requires_grad:
            c_new.requires_grad = True
            c_new._node = Node(_CELL_STATE, (acts, c), {"acts": acts_data}, c_new)
            h.requires_grad = True
            h._node = Node(_HIDDEN, (acts, c_new), {"acts": acts_data, "tc": tc}, h)
    return h, c_new


@quiet
def _forward(x: Any, c: Any) -> tuple[Any, Any, Any, Any]:
    """The decomposed kernels on arrays: (acts, c', tanh c', h')."""
    qi, qf, qg, qo = _quarters(x.shape[1] // 4)
    acts = _SIGMOID.kernel(np, x)  # each element's value alone: one call over all four gates,
    acts[:, qg] = np.tanh(x[:, qg])  # then g's quarter replaced by its tanh
    c_new = np.multiply(acts[:, qf], c)
    c_new += np.multiply(acts[:, qi], acts[:, qg])
    tc = np.tanh(c_new)
    return acts, c_new, tc, np.multiply(acts[:, qo], tc)


@quiet
def _activations_backward(g: Any, acts: Any, qi: slice, qf: slice, qg: slice, qo: slice) -> Any:
    """Each activation's VJP on its quarter: g y (1 - y) for a sigmoid, g (1 - y y) for the tanh."""
    one = acts.dtype.type(1)
    out = np.empty_like(g)
    for q in (qi, qf, qo):
        y = acts[:, q]
        np.multiply(g[:, q], np.multiply(y, np.subtract(one, y)), out=out[:, q])
    y = acts[:, qg]
    np.multiply(g[:, qg], np.subtract(one, np.multiply(y, y)), out=out[:, qg])
    return out


@quiet
def _cell_state_backward(g: Any, c: Any, acts: Any, qi: slice, qf: slice, qg: slice) -> tuple[Any, Any]:
    """The products' VJPs: (the (i, f, g) activations' gradient side by side, the old cell state's)."""
    hidden = g.shape[1]
    ga = np.empty((g.shape[0], 3 * hidden), g.dtype)
    np.multiply(g, acts[:, qg], out=ga[:, :hidden])  # sigmoid i: g * tanh g
    np.multiply(g, c, out=ga[:, hidden:2 * hidden])  # sigmoid f: g * c
    np.multiply(g, acts[:, qi], out=ga[:, 2 * hidden:])  # tanh g: g * sigmoid i
    return ga, np.multiply(g, acts[:, qf])


@quiet
def _hidden_backward(g: Any, so: Any, tc: Any) -> tuple[Any, Any]:
    """(the o activation's gradient, the gradient h' sends c' through its tanh)."""
    g_tc = np.multiply(g, so)
    return np.multiply(g, tc), np.multiply(g_tc, np.subtract(tc.dtype.type(1), np.multiply(tc, tc)))
