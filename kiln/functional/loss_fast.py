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

from types import MethodType, SimpleNamespace
from typing import Any

import numpy as np

from .. import autograd
from ..autograd import Node
from ..ops.primitive import REGISTRY, Primitive, array_vjp
from ..trace_state import trace_state
from ..ops.quiet import quiet
from ..tensor import Tensor


def _raw(name: str) -> Any:
    """A primitive's kernel, bound to it, without its `quiet` wrapper (the callers here run under one)."""
    prim = REGISTRY[name]
    kernel = type(prim).kernel
    return MethodType(getattr(kernel, "__wrapped__", kernel), prim)


_K = SimpleNamespace(**{n: _raw(n) for n in ("sub", "exp", "log", "div", "mul", "neg", "where", "ne", "add")})
_P_MAX, _P_SUM, _P_CHECK = REGISTRY["max"], REGISTRY["sum"], REGISTRY["check_targets"]
_ROW = (1,)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_INT64 = np.dtype(np.int64)


class _CrossEntropyIndices(Primitive):
    """The node of `fast_cross_entropy`; not a registered primitive (tracers never see it)."""

    # the VJP reads arrays of its own forward, which nobody else holds; the logits themselves (params["logits"],
    # not version-checked: the arrays suffice) only where it recomputes the softmax from them (create_graph)
    saves_inputs = ()

    def vjp(self, g: Tensor, inputs: tuple, node: Node, *, logits: Tensor, **params: Any) -> tuple:
        if not array_vjp(g) or g._data.dtype != params["e"].dtype:
            return _decomposed_vjp(g, logits, params)
        return (Tensor._wrap(_backward(g._data, **params), logits._device), None)


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
    out = Tensor._wrap(np.asarray(_forward(x, t, ignore_index, reduction, saved := [])), input._device)
    if input.requires_grad and autograd.is_grad_enabled():
        out.requires_grad = True
        e, s, valid, rows, cols, validf, total_w = saved
        params = {"e": e, "s": s, "valid": valid, "rows": rows, "cols": cols, "validf": validf,
                  "total_w": total_w, "reduction": reduction, "x_version": input._version, "logits": input}
        out._node = Node(_NODE_PRIM, (input, target), params, out)
    return out


@quiet
def _forward(x: Any, t: Any, ignore_index: int, reduction: str, saved: list) -> Any:
    """The decomposed loss's kernels on arrays, in its order; `saved` gets what the backward reads."""
    _P_CHECK.kernel(np, t, op="cross_entropy", n_classes=x.shape[1], ignore_index=ignore_index)
    m = _P_MAX.kernel(np, x, axes=_ROW, keepdims=True)
    shifted = _K.sub(np, x, m)
    e = _K.exp(np, shifted)
    s = _P_SUM.kernel(np, e, axes=_ROW, keepdims=True)
    logp = _K.sub(np, shifted, _K.log(np, s))
    valid = _K.ne(np, t, np.asarray(ignore_index, dtype=t.dtype))
    cols = _K.where(np, valid, t, np.zeros((), t.dtype))
    rows = np.arange(x.shape[0])
    picked = logp[rows, cols]  # the gather of each row's target log-probability (a copy: exact)
    validf = valid.astype(x.dtype)
    loss = _K.where(np, valid, _K.mul(np, _K.neg(np, picked), validf), np.zeros((), x.dtype))
    total_w = None
    if reduction != "none":
        loss = _P_SUM.kernel(np, loss, axes=(0,), keepdims=False)
        if reduction == "mean":
            total_w = _P_SUM.kernel(np, validf, axes=(0,), keepdims=False)
            loss = _K.div(np, loss, total_w)
    saved.extend((e, s, valid, rows, cols, validf, total_w))
    return loss


@quiet
def _backward(g: Any, *, e: Any, s: Any, valid: Any, rows: Any, cols: Any, validf: Any, total_w: Any,
              reduction: str, x_version: int) -> Any:
    """The logits' gradient: the decomposed VJPs' array operations, in the engine's order."""
    n = valid.shape[0]
    if reduction == "mean":
        g = _K.div(np, g, total_w)  # Div: g / total weight
    # Sum: reshape, expand (the where broadcasts g instead); Where: where(c, g, zeros_like(g))
    g = _K.where(np, valid, g, np.zeros((n,), g.dtype))
    g = _K.neg(np, _K.mul(np, g, validf))  # Mul by the weights, then Neg
    glogp = np.zeros(e.shape, g.dtype)  # Gather: scatter-add into zeros (one target a row: 0 + g, as add.at)
    glogp[rows, cols] += g
    # Sub(shifted, log s): shifted gets glogp as it is; log s gets -glogp summed over the row,
    # then Log divides by s, Sum expands, Exp multiplies by e; shifted's two grads are added
    gl = _P_SUM.kernel(np, _K.neg(np, glogp), axes=_ROW, keepdims=True)
    gexp = _K.mul(np, _K.div(np, gl, s), e)  # the product broadcasts, as the expand would
    return _K.add(np, glogp, gexp)


def _decomposed_vjp(g: Tensor, x: Tensor, params: dict) -> tuple:
    """The same gradient written in kiln ops of the logits `x`, so that it is recorded: higher-order
    gradients (create_graph) and tracers see it. Softmax is recomputed from the logits."""
    from . import math as f  # noqa: PLC0415 - cycle: kiln.functional imports this module
    from .creation import zeros, zeros_like  # noqa: PLC0415
    from .shape import scatter_add_unchecked  # noqa: PLC0415

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
    idx = wrap(params["cols"].reshape(n, 1), dev)
    glogp = scatter_add_unchecked(zeros(tuple(x.shape), dtype=g.dtype, device=dev), 1, idx, g.reshape(n, 1))
    gl = f.sum(f.neg(glogp), 1, True)
    return (f.add(glogp, f.mul(f.div(gl, s).expand(tuple(x.shape)), e)), None)
