"""OnnxBuilder: accumulates ONNX nodes and initializers under unique, readable names.

Lowerings (kiln/onnx/ops.py) talk to this class only: ``b.op("Add", [x, y])``
appends a node and returns its output name; ``b.const(array)`` adds an
initializer; ``b.shape_tensor(shape)`` turns a shape that may hold symbolic dims
(``(B, 25, 784)``) into an int64 tensor, computing the symbolic parts at run time
with Shape/Gather/Concat and integer arithmetic.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..dtypes import DType
from ..jit.symbolic import Expr
from .errors import ExportError

ONNX_TYPE: dict[str, int] = {
    "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE, "float16": TensorProto.FLOAT16,
    "int32": TensorProto.INT32, "int64": TensorProto.INT64, "bool": TensorProto.BOOL,
}
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


def onnx_type(dtype: DType) -> int:
    """The TensorProto element type of a kiln dtype."""
    return ONNX_TYPE[dtype.name]


class OnnxBuilder:
    """Collects the nodes and initializers of one ONNX graph."""

    def __init__(self, opset: int):
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._used: set[str] = set()
        self._int_consts: dict[tuple, str] = {}
        self._dims: dict[str, tuple[str, int]] = {}  # symbol -> (onnx tensor name, axis)
        self._dim_tensors: dict[str, str] = {}  # str(expr) -> 1-element int64 tensor name

    # ---- names --------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A name not used yet in this graph: `hint`, else `hint_1`, `hint_2`, ..."""
        name, k = hint, 0
        while name in self._used:
            k += 1
            name = f"{hint}_{k}"
        self._used.add(name)
        return name

    # ---- nodes and constants ------------------------------------------------------
    def op(self, op_type: str, inputs: Sequence[str], hint: str | None = None, **attrs: Any) -> str:
        """Append one node with a single output; returns the output's name."""
        out = self.fresh(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=self.fresh(f"{out}/{op_type}"),
                                           **attrs))
        return out

    def const(self, value: Any, hint: str = "const", dtype: Any = None) -> str:
        """Add an initializer holding `value` (an array or number); returns its name."""
        array = np.asarray(value, dtype=dtype, order="C")  # (ascontiguousarray would make 0-d 1-d)
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def int64s(self, values: Sequence[int]) -> str:
        """A shared 1-D int64 constant (axes, pads, static shapes)."""
        key = tuple(int(v) for v in values)
        name = self._int_consts.get(key)
        if name is None:
            name = self._int_consts[key] = self.const(np.array(key, dtype=np.int64), "ints")
        return name

    def int64_scalar(self, value: int) -> str:
        key = ("scalar", int(value))
        name = self._int_consts.get(key)
        if name is None:
            name = self._int_consts[key] = self.const(np.array(int(value), dtype=np.int64), "int")
        return name

    # ---- symbolic dims ------------------------------------------------------------
    def define_dim(self, symbol: str, tensor: str, axis: int) -> None:
        """Symbol `symbol` is the size of `tensor` (a graph input) along `axis`."""
        self._dims.setdefault(symbol, (tensor, axis))

    def dim(self, value: Any) -> str:
        """A 1-element int64 tensor holding `value`: an int, or a SymInt computed at run time."""
        expr = getattr(value, "expr", None)
        if expr is None:
            return self.int64s([int(value)])
        return self._expr_tensor(expr)

    def shape_tensor(self, shape: Sequence[Any]) -> str:
        """A 1-D int64 tensor of `shape`; a constant unless some entries are symbolic."""
        if not any(getattr(d, "expr", None) is not None for d in shape):
            return self.int64s([int(d) for d in shape])
        parts = [self.dim(d) for d in shape]
        return self.op("Concat", parts, hint="shape", axis=0)

    def ints_tensor(self, values: Sequence[Any]) -> str:
        """Slice starts/ends/steps: like shape_tensor (values may be negative or symbolic)."""
        return self.shape_tensor(values)

    def _expr_tensor(self, expr: Expr) -> str:
        key = str(expr)
        name = self._dim_tensors.get(key)
        if name is not None:
            return name
        if expr.op == "sym":
            symbol = expr.args[0]
            if symbol not in self._dims:
                raise ExportError(f"kiln.onnx.export: symbolic dim {symbol!r} has no input it comes from")
            tensor, axis = self._dims[symbol]
            shape = self.op("Shape", [tensor], hint=f"shape_of_{tensor}")
            name = self.op("Gather", [shape, self.int64s([axis])], hint=symbol, axis=0)
        elif expr.op == "neg":
            name = self.op("Neg", [self._operand(expr.args[0])], hint="dim")
        else:
            onnx_op = {"+": "Add", "-": "Sub", "*": "Mul", "//": "Div", "%": "Mod"}.get(expr.op)
            if onnx_op is None:
                raise ExportError(f"kiln.onnx.export: the dim expression {expr} uses '{expr.op}', which has no "
                                  "integer ONNX form; compute shapes with + - * // % only")
            name = self.op(onnx_op, [self._operand(expr.args[0]), self._operand(expr.args[1])], hint="dim")
        self._dim_tensors[key] = name
        return name

    def _operand(self, x: Any) -> str:
        return self._expr_tensor(x) if isinstance(x, Expr) else self.int64s([int(x)])

    def number(self, value: Any, dtype: DType) -> str:
        """A 1-element tensor of `dtype` holding `value`: a number, or a SymInt/SymFloat such as 1/B."""
        expr = getattr(value, "expr", None)
        if expr is None:
            return self.const(np.array([value], dtype=dtype.np), "value")
        name, _ = self._number_expr(expr)
        return self.op("Cast", [name], hint="value", to=onnx_type(dtype))

    def _number_expr(self, x: Any) -> tuple[str, bool]:
        """(tensor name, is float64) for an expression that may divide or hold float constants."""
        if not isinstance(x, Expr):
            if isinstance(x, float):
                return self.const(np.array([x], dtype=np.float64), "value"), True
            return self.int64s([int(x)]), False
        if x.op == "sym":
            return self._expr_tensor(x), False
        if x.op == "neg":
            name, is_float = self._number_expr(x.args[0])
            return self.op("Neg", [name], hint="value"), is_float
        (a, a_float), (b, b_float) = self._number_expr(x.args[0]), self._number_expr(x.args[1])
        if x.op != "/" and not (a_float or b_float):
            return self._expr_tensor(x), False
        if x.op == "%":
            raise ExportError(f"kiln.onnx.export: the value {x} takes a float remainder, which has no exact "
                              "ONNX form; compute it from integer sizes")
        a = a if a_float else self.op("Cast", [a], hint="value", to=TensorProto.DOUBLE)
        b = b if b_float else self.op("Cast", [b], hint="value", to=TensorProto.DOUBLE)
        if x.op == "//":
            return self.op("Floor", [self.op("Div", [a, b], hint="value")], hint="value"), True
        return self.op({"+": "Add", "-": "Sub", "*": "Mul", "/": "Div"}[x.op], [a, b], hint="value"), True


def value_info(name: str, dtype: DType, shape: Sequence[Any]) -> onnx.ValueInfoProto:
    """A typed graph input/output; plain symbolic dims become dim_param names, expressions stay unnamed."""
    dims: list[Any] = []
    for d in shape:
        expr = getattr(d, "expr", None)
        if expr is None:
            dims.append(int(d))
        elif expr.op == "sym":
            dims.append(expr.args[0])
        else:
            dims.append(None)
    return helper.make_tensor_value_info(name, onnx_type(dtype), dims)
