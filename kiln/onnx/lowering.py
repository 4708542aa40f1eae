"""Lowering: walk a kiln inference Graph and build the ONNX GraphProto.

Graph inputs become ONNX inputs (call arguments), named initializers (module
parameters and buffers, under their state-dict names) or constant initializers
(captured tensors and literals). Each node is lowered through the table in
kiln/onnx/ops.py, after the fusions of kiln/onnx/patterns.py claim their chains.
"""
from __future__ import annotations

from typing import NoReturn, Sequence

import numpy as np
import onnx
from onnx import helper

from ..jit.ir import Node, Value
from ..jit.symbolic import is_symbolic
from ..tensor import _to_host
from .builder import OnnxBuilder, value_info
from .errors import UnsupportedOpError, node_line
from .ops import LOWERINGS, SYMBOLIC_PARAMS
from .patterns import find_fusions
from .trace import ExportTrace


class Lowering:
    """The state of one export: the builder, and the ONNX name of every kiln value."""

    def __init__(self, trace: ExportTrace, opset: int):
        self.graph = trace.graph
        self.trace = trace
        self.opset = opset
        self.b = OnnxBuilder(opset)
        self.names: dict[int, str] = {}

    def name(self, value: Value) -> str:
        """The ONNX name holding `value`."""
        return self.names[value.id]

    def unsupported(self, node: Node, why: str = "") -> NoReturn:
        raise UnsupportedOpError(node.prim.name, node_line(self.graph, node), why)

    # ---- the walk -----------------------------------------------------------------
    def run(self, input_names: Sequence[str], output_names: Sequence[str], graph_name: str) -> onnx.GraphProto:
        inputs = self._inputs(input_names)
        fusions = find_fusions(self.graph)
        for node in self.graph.nodes:
            fusion = fusions.get(node.out.id)
            if fusion is not None:
                if fusion.root is node:
                    self.names[node.out.id] = fusion.emit(self)
                continue
            lower = LOWERINGS.get(node.prim.name)
            if lower is None:
                self.unsupported(node)
            if node.prim.name not in SYMBOLIC_PARAMS and is_symbolic(node.params):
                self.unsupported(node, "its parameters depend on a dynamic dim, which this mapping cannot "
                                       "compute at run time; export without dynamic_dims")
            self.names[node.out.id] = lower(self, node, [self.name(v) for v in node.inputs])
        outputs = []
        for value, out_name in zip(self.graph.outputs, output_names):
            self.b.nodes.append(helper.make_node("Identity", [self.name(value)], [out_name],
                                                 name=self.b.fresh(f"{out_name}/Identity")))
            outputs.append(value_info(out_name, value.dtype, value.shape))
        return helper.make_graph(self.b.nodes, graph_name, inputs, outputs, self.b.initializers)

    def _inputs(self, input_names: Sequence[str]) -> list[onnx.ValueInfoProto]:
        """Register every graph input; returns the ONNX graph inputs (the call arguments)."""
        b = self.b
        for name in input_names:
            b.fresh(name)  # reserve them before anything else takes the name
        used = {v.id for n in self.graph.nodes for v in n.inputs} | {v.id for v in self.graph.outputs}
        arg_names = dict(enumerate(input_names))
        inputs = []
        position = 0
        for value, spec in zip(self.graph.inputs, self.graph.specs):
            if spec.kind == "arg":
                name = arg_names[position]
                position += 1
                self.names[value.id] = name
                inputs.append(value_info(name, value.dtype, value.shape))
                for axis, dim in enumerate(value.shape):
                    expr = getattr(dim, "expr", None)
                    if expr is not None and expr.op == "sym":
                        b.define_dim(expr.args[0], name, axis)
            elif value.id not in used:
                continue  # unused parameters are not exported
            elif spec.kind == "rng":
                self.names[value.id] = "<random key>"  # never emitted: the random op using it is unsupported
            elif spec.kind in ("param", "buffer"):
                self.names[value.id] = b.const(_to_host(spec.ref._data), spec.name)
            elif spec.kind == "captured":
                self.names[value.id] = b.const(_to_host(spec.ref._data), "captured")
            else:  # a literal baked at trace time
                self.names[value.id] = b.const(np.asarray(spec.literal, dtype=value.dtype.np), "const")
        return inputs
