"""Errors raised by kiln.onnx.export."""
from __future__ import annotations

from ..jit.ir import Graph, Node


class ExportError(RuntimeError):
    """The traced program cannot be written as an ONNX model; the message says why and what to do."""


class UnsupportedOpError(ExportError):
    """A primitive (or a form of one) has no ONNX mapping. `op` is its name, `line` its xpr line."""

    def __init__(self, op: str, line: str, why: str = ""):
        self.op = op
        self.line = line
        detail = f": {why}" if why else ""
        super().__init__(f"kiln.onnx.export: primitive '{op}' has no ONNX mapping{detail}\n"
                         f"  at: {line}\n"
                         "Fix: rewrite that part of the model with ops that export (see kiln.onnx.SUPPORTED_OPS), "
                         "or export a smaller function around it.")


def node_line(graph: Graph, node: Node) -> str:
    """The xpr text line of `node` in `graph`, e.g. ``c:f32[B,256] = matmul a b``."""
    lines = graph.to_text().splitlines()
    index = next(i for i, n in enumerate(graph.nodes) if n is node)
    text = lines[1 + index].strip()
    return text.removeprefix("let ")
