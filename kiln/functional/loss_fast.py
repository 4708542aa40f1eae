"""Eager cross-entropy of class indices as one autograd node (the common training-loop loss).

`cross_entropy` is written in primitives (log_softmax, gather, where, sum, div): about 20
primitive calls forward and as many VJPs backward, whose per-call dispatch dominates on a
small batch. Eagerly, for the common case (2-D float logits on the CPU, int64 class
indices, no class weights, no label smoothing), `fast_cross_entropy` runs the same
primitive kernels on the arrays, in the same order, and records one node whose backward
runs the arrays of each decomposed VJP in the order the autograd engine would: values and
gradients are bit-identical to the decomposed path. A tracer (kiln.compile) always sees
the decomposed primitives, which its backends fuse; a backward that itself builds a graph
(``create_graph=True``) or runs under a tracer writes the same gradient in kiln ops.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import autograd
from ..autograd import Node
from ..ops.primitive import REGISTRY, Primitive, trace_state
from ..tensor import Tensor

_MAX, _SUM, _SUB, _EXP, _LOG = (REGISTRY[n] for n in ("max", "sum", "sub", "exp", "log"))
_DIV, _MUL, _NEG, _WHERE, _NE = (REGISTRY[n] for n in ("div", "mul", "neg", "where", "ne"))
_GATHER, _SCATTER_ADD, _CHECK = REGISTRY["gather"], REGISTRY["scatter_add"], REGISTRY["check_targets"]
_ROW = (1,)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_INT64 = np.dtype(np.int64)


class _CrossEntropyIndices(Primitive):
    """The node of `fast_cross_entropy`; not a registered primitive (tracers never see it)."""

    saves_inputs = ()  # the VJP reads only arrays of its own forward, which nobody else holds

    def vjp(self, g: Tensor, inputs: tuple, node: Node, **params: Any) -> tuple:
        if autograd.is_grad_enabled() or trace_state.tracer is not None or g._data.dtype != params["e"].dtype:
            return _decomposed_vjp(g, inputs, params)
        return (Tensor._wrap(_backward(g._data, **params), inputs[0]._device), None)


_NODE_PRIM = _CrossEntropyIndices()
_NODE_PRIM.name = "cross_entropy"


def fast_cross_entropy(input: Tensor, target: Tensor, weight: Any, ignore_index: int,  # noqa: A002
                       reduction: str, label_smoothing: float) -> Tensor | None:
    """`cross_entropy` as one node when the case allows it (see the module doc), else None."""
    if (trace_state.tracer is not None or weight is not None or label_smoothing != 0.0
            or reduction not in ("mean", "sum", "none") or type(input) is not Tensor or type(target) is not Tensor):
        return None
    x, t = input._data, target._data
    if (type(x) is not np.ndarray or type(t) is not np.ndarray or x.ndim != 2 or t.ndim != 1
            or x.dtype not in _FLOATS or t.dtype != _INT64 or t.shape[0] != x.shape[0]
            or x.shape[0] == 0 or x.shape[1] == 0 or input._device is not target._device):
        return None
    _CHECK.kernel(np, t, op="cross_entropy", n_classes=x.shape[1], ignore_index=ignore_index)
    m = _MAX.kernel(np, x, axes=_ROW, keepdims=True)
    shifted = _SUB.kernel(np, x, m)
    e = _EXP.kernel(np, shifted)
    s = _SUM.kernel(np, e, axes=_ROW, keepdims=True)
    logp = _SUB.kernel(np, shifted, _LOG.kernel(np, s))
    valid = _NE.kernel(np, t, np.asarray(ignore_index, dtype=t.dtype))
    idx = _WHERE.kernel(np, valid, t, np.zeros((), t.dtype)).reshape(-1, 1)
    picked = _GATHER.kernel(np, logp, idx, axis=1).reshape(-1)
    validf = valid.astype(x.dtype)
    loss = _WHERE.kernel(np, valid, _MUL.kernel(np, _NEG.kernel(np, picked), validf), np.zeros((), x.dtype))
    total_w = None
    if reduction != "none":
        loss = _SUM.kernel(np, loss, axes=(0,), keepdims=False)
        if reduction == "mean":
            total_w = _SUM.kernel(np, validf, axes=(0,), keepdims=False)
            loss = _DIV.kernel(np, loss, total_w)
    out = Tensor._wrap(np.asarray(loss), input._device)
    if input.requires_grad and autograd.is_grad_enabled():
        out.requires_grad = True
        params = {"e": e, "s": s, "valid": valid, "idx": idx, "validf": validf, "total_w": total_w,
                  "reduction": reduction, "x_version": input._version}
        out._node = Node(_NODE_PRIM, (input, target), params, out)
    return out


def _backward(g: Any, *, e: Any, s: Any, valid: Any, idx: Any, validf: Any, total_w: Any,
              reduction: str, x_version: int) -> Any:
    """The logits' gradient: the decomposed VJPs' array operations, in the engine's order."""
    n = valid.shape[0]
    if reduction == "mean":
        g = _DIV.kernel(np, g, total_w)  # Div: g / total weight
    if reduction != "none":
        g = np.broadcast_to(g.reshape(1), (n,))  # Sum: reshape, expand
    g = _WHERE.kernel(np, valid, g, np.zeros(g.shape, g.dtype))  # Where: where(c, g, zeros_like(g))
    g = _NEG.kernel(np, _MUL.kernel(np, g, validf))  # Mul by the weights, then Neg
    glogp = _SCATTER_ADD.kernel(np, np.zeros(e.shape, g.dtype), idx, g.reshape(n, 1), axis=1)  # Gather
    # Sub(shifted, log s): shifted gets glogp as it is; log s gets -glogp summed over the row,
    # then Log divides by s, Sum expands, Exp multiplies by e; shifted's two grads are added
    gl = _SUM.kernel(np, _NEG.kernel(np, glogp), axes=_ROW, keepdims=True)
    gexp = _MUL.kernel(np, np.broadcast_to(_DIV.kernel(np, gl, s), e.shape), e)
    return REGISTRY["add"].kernel(np, glogp, gexp)


def _decomposed_vjp(g: Tensor, inputs: tuple, params: dict) -> tuple:
    """The same gradient written in kiln ops of the logits, so that it is recorded: higher-order
    gradients (create_graph) and tracers see it. Softmax is recomputed from the logits."""
    from . import math as f  # noqa: PLC0415 - cycle: kiln.functional imports this module
    from .creation import zeros, zeros_like  # noqa: PLC0415
    from .shape import scatter_add_unchecked  # noqa: PLC0415

    x = inputs[0]
    if x._version != params["x_version"]:
        raise RuntimeError(
            "cross_entropy: its input was modified by an inplace operation after the loss was computed, "
            "and this backward (create_graph=True, or under kiln.compile) recomputes the softmax from it. "
            "Fix: .clone() the logits before modifying them.")
    dev = x._device
    wrap = Tensor._wrap
    shifted = f.sub(x, f.amax(x, 1, True).detach())
    e = f.exp(shifted)
    s = f.sum(e, 1, True)
    valid, validf = wrap(params["valid"], dev), wrap(params["validf"], dev)
    n = params["valid"].shape[0]
    if params["reduction"] == "mean":
        g = f.div(g, wrap(params["total_w"], dev))
    if params["reduction"] != "none":
        g = g.reshape(1).expand(n)
    g = f.where(valid, g, zeros_like(g))
    g = f.neg(f.mul(g, validf))
    glogp = scatter_add_unchecked(zeros(tuple(x.shape), dtype=g.dtype, device=dev), 1, wrap(params["idx"], dev),
                                  g.reshape(n, 1))
    gl = f.sum(f.neg(glogp), 1, True)
    return (f.add(glogp, f.mul(f.div(gl, s).expand(tuple(x.shape)), e)), None)
