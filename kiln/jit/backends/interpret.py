"""The reference backend: replay a graph node by node through the primitives' kernels.

A `Plan` numbers every value with a slot, turns nodes into (kernel, input slots,
params, output slot) steps and frees each slot after its last use. Symbolic params
(from dynamic_dims) are re-evaluated per call for that call's sizes.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..ir import Graph
from ..symbolic import is_symbolic, resolve


class Plan:
    """A graph lowered to a flat list of kernel calls over numbered slots."""

    backend = "interpret"

    def __init__(self, graph: Graph, xp: Any = np):
        self.graph = graph
        self.xp = xp
        slot: dict[int, int] = {v.id: i for i, v in enumerate(graph.inputs)}
        self.n_inputs = len(graph.inputs)
        steps = []
        for node in graph.nodes:
            slot[node.out.id] = len(slot)
            steps.append([node.prim.kernel, tuple(slot[v.id] for v in node.inputs), node.params,
                          slot[node.out.id], is_symbolic(node.params), ()])
        self.n_slots = len(slot)
        keep = {slot[v.id] for v in graph.outputs} | {slot[w.value.id] for w in graph.state_writes}
        last_use: dict[int, int] = {}
        for i, step in enumerate(steps):
            for s in step[1]:
                last_use[s] = i
        frees: dict[int, list[int]] = {}
        for s, i in last_use.items():
            if s not in keep:
                frees.setdefault(i, []).append(s)
        for i, step in enumerate(steps):
            step[5] = tuple(frees.get(i, ()))
        self.steps = [tuple(s) for s in steps]
        self.symbolic = any(s[4] for s in self.steps)
        self.out_slots = [slot[v.id] for v in graph.outputs]
        # an output that is a literal, parameter or captured input must not hand out that memory
        self.copy_outputs = [s < self.n_inputs and graph.specs[s].kind != "arg" for s in self.out_slots]
        self.write_slots = [slot[w.value.id] for w in graph.state_writes]

    def run(self, inputs: list, dims: dict[str, int] | None = None) -> tuple[list, list]:
        """Execute on input arrays; returns (output arrays, state-write arrays)."""
        env: list[Any] = [None] * self.n_slots
        env[: self.n_inputs] = inputs
        xp = self.xp
        symbolic = self.symbolic and dims is not None
        for kernel, ins, params, out, sym, frees in self.steps:
            if sym and symbolic:
                params = resolve(params, dims)
            env[out] = kernel(xp, *[env[i] for i in ins], **params)
            for i in frees:
                env[i] = None
        outs = [env[i] for i in self.out_slots]
        if any(self.copy_outputs):
            outs = [o.copy() if c else o for o, c in zip(outs, self.copy_outputs)]
        return outs, [env[i] for i in self.write_slots]


def lower(graph: Graph) -> Plan:
    """The interpreter's lowering: graph -> Plan."""
    return Plan(graph)
