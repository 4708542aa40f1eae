"""Eager ops that run through cached compiled plans: cross-entropy of large logits.

Called eagerly on float32 logits (N, C) of at least `MIN_ELEMENTS` elements with int64 class indices,
`cross_entropy` (kiln/functional/losses.py) runs its own primitive decomposition, what a tracer records,
through two functions compiled once per (C, ignore_index, reduction, label_smoothing) with the batch N
symbolic: the loss, and the logits' gradient for an upstream gradient g (the loss recomputed inside and
differentiated by the compiler). Both run generated kernels on every CPU: a word language model's
700 x 5000 logits took 26 ms forward and backward through NumPy and take about 13 ms so (a 2-CPU Zen 3).
The results are what kiln.compile gives for the same code: eager's bits, except that exp and log are
kiln's float32 vector math, within 4 ulp of NumPy's (the compiler's contract).

The loss is one autograd node that keeps the logits and the targets. Its backward runs the compiled
gradient; one that builds a graph (``create_graph=True``), or runs under a tracer, differentiates the
decomposition in kiln ops instead, so higher-order gradients work as on the NumPy path.

Smaller logits stay on the NumPy path (functional/loss_fast.py), where a compiled call's fixed cost would
not pay, and no process compiles plans for a loss it calls on small batches. Without a C compiler every
call stays there. The eager core does not import the compiler: this module installs `cross_entropy` into
kiln/functional/loss_compiled.py when kiln.jit is imported.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from .. import autograd
from ..autograd import Node
from ..functional import loss_compiled
from ..ops.primitive import Primitive, array_vjp
from ..tensor import Tensor
from ..trace_state import trace_state
from .api import compile
from .backends import cpu

MIN_ELEMENTS = 1 << 20
"""Logits of this many elements and more run compiled: 1M float32 (4 MB) take about 8 ms through NumPy,
against a compiled call's fixed cost of about 0.1 ms."""

_ROWS = {0: {0: "N"}, 1: {0: "N"}}  # the batch dim of the logits and of the targets: one symbolic size
_ROWS_OF_G = {**_ROWS, 2: {0: "N"}}  # and of the upstream gradient of a per-row loss (reduction "none")
_compiled: dict[tuple, tuple[Callable, Callable] | None] = {}
_lock = threading.Lock()


class _CompiledCrossEntropy(Primitive):
    """The node of a compiled eager cross-entropy; not a registered primitive (tracers never see it)."""

    saves_inputs = (0, 1)  # the logits and the targets: the gradient is computed from them (version-checked)

    def vjp(self, g: Tensor, inputs: tuple, node: Node, *, gradient: Callable, loss: Callable) -> tuple:
        logits, classes = inputs
        if array_vjp(g) and g._data.dtype == logits._data.dtype:
            return gradient(logits, classes, g), None
        with autograd.enable_grad():  # a graph is being built: the decomposition in kiln ops, differentiated
            (grad,) = autograd.grad(loss(logits, classes), [logits], g, create_graph=True)
        return grad, None


_NODE_PRIM = _CompiledCrossEntropy()
_NODE_PRIM.name = "cross_entropy"


def _functions(decomposed: Callable, ignore_index: int, reduction: str, label_smoothing: float
               ) -> tuple[Callable, Callable]:
    """The loss and its logits' gradient as plain functions of tensors (what gets compiled)."""

    def loss(logits: Tensor, classes: Tensor) -> Tensor:
        return decomposed(logits, classes, None, ignore_index, reduction, label_smoothing)

    def gradient(logits: Tensor, classes: Tensor, g: Tensor) -> Tensor:
        with autograd.enable_grad():
            x = logits.detach().requires_grad_(True)
            (grad,) = autograd.grad(loss(x, classes), [x], g)
        return grad

    return loss, gradient


def cross_entropy(decomposed: Callable, input: Tensor, target: Tensor, weight: Any,  # noqa: A002
                  ignore_index: int, reduction: str, label_smoothing: float) -> Tensor | None:
    """``decomposed(input, target, weight, ignore_index, reduction, label_smoothing)`` through its cached
    compiled plans, or None when the call is not one this path takes (see the module docstring)."""
    if trace_state.tracer is not None or trace_state.lazy is not None or weight is not None:
        return None
    x, t = getattr(input, "_data", None), getattr(target, "_data", None)
    if (type(x) is not np.ndarray or type(t) is not np.ndarray or x.dtype != np.float32 or x.ndim != 2
            or x.size < MIN_ELEMENTS or t.dtype != np.int64 or t.shape != x.shape[:1]
            or input._device is not target._device):
        return None
    key = (x.shape[1], ignore_index, reduction, label_smoothing)
    if key not in _compiled:
        with _lock:
            if key not in _compiled:
                loss, gradient = _functions(decomposed, ignore_index, reduction, label_smoothing)
                _compiled[key] = None if not cpu.available() else (
                    compile(loss, backend="cpu", dynamic_dims=_ROWS),
                    compile(gradient, backend="cpu", dynamic_dims=_ROWS_OF_G if reduction == "none" else _ROWS))
    compiled = _compiled[key]
    if compiled is None:
        return None
    loss_plan, gradient_plan = compiled
    with autograd.no_grad():
        out = loss_plan(input, target)
    if input.requires_grad and autograd.is_grad_enabled():
        out.requires_grad = True
        out._node = Node(_NODE_PRIM, (input, target), {"gradient": gradient_plan, "loss": _functions(
            decomposed, ignore_index, reduction, label_smoothing)[0]}, out)
    return out


loss_compiled.install(cross_entropy)
