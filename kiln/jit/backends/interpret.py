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
        self.source, self._run = self._generate()

    def _generate(self) -> tuple[str, Any]:
        """Straight-line Python for the steps: one local per slot, constants bound by name.

        Replaying generated code instead of looping over the step list cuts the per-node
        overhead several-fold; `plan.source` shows exactly what runs.
        """
        namespace: dict[str, Any] = {"xp": self.xp, "resolve": resolve}
        lines = ["def run(inputs, dims):"]
        if self.n_inputs:
            lines.append("    " + ", ".join(f"s{i}" for i in range(self.n_inputs)) + ", = inputs")
        for n, (kernel, ins, params, out, sym, frees) in enumerate(self.steps):
            namespace[f"k{n}"] = kernel
            args = ["xp"] + [f"s{i}" for i in ins]
            if sym:
                namespace[f"p{n}"] = params
                args.append(f"**(resolve(p{n}, dims) if dims is not None else p{n})")
            else:
                for j, (name, value) in enumerate(params.items()):
                    namespace[f"c{n}_{j}"] = value
                    args.append(f"{name}=c{n}_{j}")
            lines.append(f"    s{out} = k{n}({', '.join(args)})")
            if frees:
                lines.append("    del " + ", ".join(f"s{i}" for i in frees))
        outs = [f"s{i}.copy()" if c else f"s{i}" for i, c in zip(self.out_slots, self.copy_outputs)]
        writes = [f"s{i}" for i in self.write_slots]
        lines.append(f"    return [{', '.join(outs)}], [{', '.join(writes)}]")
        source = "\n".join(lines) + "\n"
        exec(compile(source, f"<kiln plan {id(self):x}>", "exec"), namespace)  # noqa: S102 - our own source
        return source, namespace["run"]

    def run(self, inputs: list, dims: dict[str, int] | None = None) -> tuple[list, list]:
        """Execute on input arrays; returns (output arrays, state-write arrays)."""
        return self._run(inputs, dims)


def lower(graph: Graph) -> Plan:
    """The interpreter's lowering: graph -> Plan."""
    return Plan(graph)
