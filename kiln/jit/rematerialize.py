"""Recompute cheap, large residuals in the backward graph instead of keeping them from the forward.

A training plan keeps every forward value its backward reads (a residual) from the forward call
to the backward call. A convolution's window columns (``unfold2d``, then a reshape to the GEMM's
operand) are the largest of them, C*kh*kw times the image they come from: in a CIFAR ResNet-18
at batch 32 they are 600 MB of 776. Eager autograd does not keep them either: its backward
remakes them from the image (autograd.recompute_saved_input). This pass does the same for
compiled plans: a residual made from one forward value by a chain of such data movements
(`RECOMPUTED`, with an unfold2d in it) leaves the forward's outputs; the backward graph gets the
chain's source (usually a residual already, such as a ReLU's output) and runs the chain again.
The columns are copies of the source's elements, so the backward's bits do not change.
"""
from __future__ import annotations

import math
from dataclasses import replace

from .autodiff import Differentiated
from .ir import InputSpec, Node, Value
from .symbolic import is_symbolic

RECOMPUTED = frozenset({"unfold2d", "reshape"})  # pure data movement: remade exactly, cheaply
WORTH = frozenset({"unfold2d"})  # a chain is remade only when it holds one of these (large results)
SMALLER = 2  # a source that is not already a residual must be at least this many times smaller


def _nbytes(v: Value) -> int:
    return math.prod(v.shape) * v.dtype.np.itemsize


def _chain(value: Value, producer: dict[int, Node]) -> tuple[Value, list[Node]] | None:
    """(source, nodes from the source to `value`) when `value` is remade from one forward value by
    RECOMPUTED nodes holding one of WORTH, else None."""
    nodes: list[Node] = []
    v = value
    while True:
        node = producer.get(v.id)
        if node is None or node.prim.name not in RECOMPUTED or len(node.inputs) != 1 or is_symbolic(node.params):
            break
        nodes.append(node)
        v = node.inputs[0]
    if not any(n.prim.name in WORTH for n in nodes):
        return None
    return v, nodes[::-1]


def recompute_residuals(diff: Differentiated, forward_real: dict) -> Differentiated:
    """`diff` with its cheap, large residuals (see the module docstring) remade in the backward graph;
    `forward_real` maps forward value ids to the tensors the trace saw (they become the
    `backward_real` of the backward's new values)."""
    forward, backward = diff.forward, diff.backward
    if any(is_symbolic(tuple(v.shape)) for v in forward.outputs):
        return diff
    residuals = forward.outputs[diff.n_outputs:]
    producer = {n.out.id: n for n in forward.nodes}
    kept_ids = {v.id for v in residuals}
    plans: dict[int, tuple[Value, list[Node]]] = {}
    for r in residuals:
        found = _chain(r, producer)
        if found is None:
            continue
        source = found[0]
        if source.id not in kept_ids and _nbytes(r) < SMALLER * _nbytes(source):
            continue
        plans[r.id] = found
    if not plans:
        return diff
    backward = backward.copy()
    by_index = {spec.ref: v for v, spec in zip(backward.inputs, backward.specs) if spec.kind == "residual"}
    input_of = {r.id: by_index[j] for j, r in enumerate(residuals)}  # forward residual -> backward input
    kept = [r for r in residuals if r.id not in plans]
    kept_ids = {r.id for r in kept}
    real = dict(diff.backward_real)
    for r in residuals:
        source = plans[r.id][0] if r.id in plans else None
        if source is not None and source.id not in kept_ids:  # the source becomes a residual
            kept.append(source)
            kept_ids.add(source.id)
            input_of[source.id] = Value(source.shape, source.dtype, source.device)
            backward.inputs.append(input_of[source.id])
            backward.specs.append(InputSpec("residual", -1))  # numbered below
            real[input_of[source.id].id] = forward_real.get(source.id)
    remade: dict[int, list[Node]] = {}  # residual input id -> the nodes that make it again
    for r in residuals:
        if r.id not in plans:
            continue
        chain = remade[input_of[r.id].id] = []
        source, nodes = plans[r.id]
        current = input_of[source.id]
        for k, node in enumerate(nodes):  # the chain again; its last value is the residual input it replaces
            last = k == len(nodes) - 1
            out = input_of[r.id] if last else Value(node.out.shape, node.out.dtype, node.out.device)
            if not last:
                real[out.id] = forward_real.get(node.out.id)
            chain.append(Node(node.prim, [current], node.params, out))
            current = out
    drop = {input_of[r.id].id for r in residuals if r.id in plans}
    position = {input_of[f.id].id: j for j, f in enumerate(kept)}  # backward input -> its residual index
    inputs, specs = [], []
    for v, spec in zip(backward.inputs, backward.specs):
        if v.id in drop:
            continue
        if spec.kind == "residual":
            spec = InputSpec("residual", position[v.id])
        inputs.append(v)
        specs.append(spec)
    backward.inputs, backward.specs = inputs, specs
    nodes: list[Node] = []
    for node in backward.nodes:  # each chain right before its first reader: one set of columns live at a time
        for v in node.inputs:
            nodes += remade.pop(v.id, ())
        nodes.append(node)
    backward.nodes = nodes + [n for chain in remade.values() for n in chain]
    forward = forward.copy()
    forward.outputs = forward.outputs[:diff.n_outputs] + kept
    return replace(diff, forward=forward, backward=backward, backward_real=real)
