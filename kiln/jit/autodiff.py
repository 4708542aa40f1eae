"""Graph-level reverse-mode autodiff, AOTAutograd-style.

The backward graph is built by *tracing the primitives' VJP rules*: we walk the
forward graph in reverse and call each VJP on the real tensors seen at trace time
while a `BackwardTracer` records; the ops the VJPs call are recorded from shapes alone,
not computed (abstract_backward.py). Forward values the VJPs read become "residual"
inputs of the backward graph (and extra outputs of the forward graph); output
cotangents become "cotangent" inputs. Eager backward and compiled backward thus
share one definition of every gradient.
"""
from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from .. import autograd
from ..gradient_sum import GradientSum
from ..tensor import Tensor
from ..unread_inputs import ShapeOnly
from .abstract_backward import shapes_only
from .ir import Graph, InputSpec, Value
from .symbolic import concrete
from .trace import Tracer

_log = logging.getLogger("kiln.jit")


class _NodeShim:
    """Stands in for an autograd Node inside a VJP: gives access to the forward output."""

    def __init__(self, out: Tensor):
        self._out = out

    def output(self) -> Tensor:
        return self._out


class BackwardTracer(Tracer):
    """A tracer whose unknown tensors are looked up among the forward values (residuals).

    Like every tracer, it holds the tensors the VJPs make weakly: a gradient is freed once the VJPs
    are done with it, as in eager backward, instead of every one staying alive until the backward
    graph is built (at real sizes, gigabytes). What the built graph needs of them, their layouts,
    is kept in `strides`.
    """

    def __init__(self, symbolic: bool):
        super().__init__(fullgraph=True)
        self.symbolic = symbolic
        self.scope: dict[int, Value] = {}  # id(real tensor) -> forward value, for the current node
        self.residuals: dict[int, Value] = {}  # forward value id -> backward input value
        self.residual_order: list[Value] = []  # forward values, in backward-input order

    def value_of(self, t: Tensor) -> Value:
        v = self.env.get(id(t))
        if v is not None:
            return v
        fwd = self.scope.get(id(t))
        if fwd is None:
            return super().value_of(t)
        got = self.residuals.get(fwd.id)
        if got is None:
            index = len(self.residual_order)
            got = Value(fwd.shape, fwd.dtype, fwd.device)
            self.graph.inputs.append(got)
            self.graph.specs.append(InputSpec("residual", index))
            self.residuals[fwd.id] = got
            self.residual_order.append(fwd)
            self.keep.append(t)
        return got

    def shape_of(self, t: Tensor) -> tuple:
        v = self.env.get(id(t))
        if v is None:
            v = self.scope.get(id(t))
        return v.shape if v is not None else t._data.shape


@dataclass
class Differentiated:
    """A forward graph that also outputs residuals, and the backward graph that consumes them."""

    forward: Graph
    backward: Graph
    n_outputs: int  # user outputs come first in forward.outputs; residuals follow
    cotangent_outputs: list[int]  # which user outputs take a cotangent (backward input order)
    grad_inputs: list[int]  # forward input indices whose grads the backward graph outputs
    shape_guards: list = field(default_factory=list)  # comparisons on symbolic sizes made by the VJPs
    backward_real: dict = field(default_factory=dict)  # backward residual input id -> the forward's tensor
    backward_strides: dict = field(default_factory=dict)  # backward value id -> strides, if not C-contiguous


def _real_or_stand_in(real: dict[int, Tensor], v: Value, node: Any, index: int, keep: list) -> Tensor:
    """The tensor the trace saw as `v`, input `index` of `node` (-1: its output); where it is gone (the trace
    holds what the function's code and autograd graph hold, and a node keeps only the shape of an input its
    VJP does not read), a shape-only stand-in for it, which the VJP must not read either (unread_inputs.py).
    The stand-in goes to `keep`, which must live as long as the scope that knows it by id."""
    t = real.get(v.id)
    if t is not None:
        return t
    shape = tuple(concrete(d) for d in v.shape)  # (a symbolic shape is the BackwardTracer's to give)
    stand_in = Tensor._wrap(ShapeOnly(shape, v.dtype.np, node.prim, index), v.device, requires_grad=True)
    keep.append(stand_in)
    return stand_in


def differentiate(graph: Graph, real: dict[int, Tensor], symbolic: bool) -> Differentiated:
    """Split a traced training graph into forward (with residuals) and backward graphs.

    The VJPs are traced from shapes alone (abstract_backward.py), computing nothing; where one needs
    values, they are traced again on the tensors the trace saw, computing a backward pass."""
    try:
        return _differentiate(graph, real, symbolic, shapes_alone=True)
    except Exception as exc:  # noqa: BLE001 - traced again with values, which raises any real error
        _log.debug("kiln: the backward graph is traced with values: %s", exc)
    return _differentiate(graph, real, symbolic, shapes_alone=False)


def _differentiate(graph: Graph, real: dict[int, Tensor], symbolic: bool, shapes_alone: bool) -> Differentiated:
    needs = graph.requires_grad
    bt = BackwardTracer(symbolic)
    grads: dict[int, GradientSum] = {}  # value id -> the gradients flowing into it so far
    cot_outputs: list[int] = []
    with bt, autograd.no_grad(), (shapes_only(bt) if shapes_alone else nullcontext()):
        for i, v in enumerate(graph.outputs):
            if v.id not in needs or not real[v.id].dtype.is_floating_point:
                continue
            ct = Tensor._wrap(real[v.id]._device.xp.ones(real[v.id]._data.shape, dtype=real[v.id]._data.dtype),
                              real[v.id]._device)
            bt.add_input(ct, InputSpec("cotangent", i), shape=v.shape)
            cot_outputs.append(i)
            grads.setdefault(v.id, GradientSum()).add(ct)
        for node in reversed(graph.nodes):
            total = grads.pop(node.out.id, None)
            if total is None or node.out.id not in needs:
                continue
            g = total.total()
            inputs = tuple(_real_or_stand_in(real, v, node, i, bt.keep) for i, v in enumerate(node.inputs))
            out = _real_or_stand_in(real, node.out, node, -1, bt.keep)
            # the scope grows: a pending gradient (kiln/gradient_sum.py) may read a node's inputs later
            bt.scope.update((id(t), v) for t, v in zip(inputs, node.inputs))
            bt.scope[id(out)] = node.out
            in_grads = node.prim.vjp(g, inputs, _NodeShim(out), **node.params)
            for v, gi in zip(node.inputs, in_grads):
                if gi is None or v.id not in needs:
                    continue
                grads.setdefault(v.id, GradientSum()).add(gi)
        grad_inputs: list[int] = []
        grad_outs: list[Tensor] = []
        for i, v in enumerate(graph.inputs):
            if v.id in needs and v.id in grads:
                grad_inputs.append(i)
                grad_outs.append(grads[v.id].total())
        bt.set_outputs(grad_outs)
    forward = graph.copy()
    n_outputs = len(forward.outputs)
    forward.outputs = forward.outputs + list(bt.residual_order)
    backward_real = {bt.residuals[fwd.id].id: real.get(fwd.id) for fwd in bt.residual_order}  # the forward's tensors
    return Differentiated(forward, bt.graph, n_outputs, cot_outputs, grad_inputs, bt.shape_guards,
                          backward_real, bt.strides)
