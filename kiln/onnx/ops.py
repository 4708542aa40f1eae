"""The mapping table: how each kiln primitive becomes ONNX nodes.

Every entry is a function ``(ctx, node, inputs) -> output name`` where `inputs`
are the ONNX names of the node's operands and `ctx` is the `Lowering` (it has the
builder ``ctx.b``, the opset, and ``ctx.unsupported(node, why)``). Simple
one-to-one ops come from the tables at the top; the rest have a function each.
Opset rules that matter here: ReduceSum takes `axes` as an input from opset 13,
ReduceMax/ReduceProd only from opset 18 (an attribute before).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
from onnx import helper

from ..dtypes import get_dtype
from ..jit.ir import Node
from ..jit.symbolic import is_symbolic
from ..ops.linalg import parse_einsum
from .builder import INT64_MIN, onnx_type
from .indexing import lower_index

if TYPE_CHECKING:
    from .lowering import Lowering

Lower = Callable[["Lowering", Node, list], str]

UNARY = {
    "neg": "Neg", "exp": "Exp", "log": "Log", "sin": "Sin", "cos": "Cos", "sqrt": "Sqrt", "tanh": "Tanh",
    "sigmoid": "Sigmoid", "relu": "Relu", "erf": "Erf", "abs": "Abs", "sign": "Sign", "floor": "Floor",
    "ceil": "Ceil", "round": "Round", "logical_not": "Not", "copy": "Identity", "stop_gradient": "Identity",
}
BINARY = {  # and where, the one three-operand op: all broadcast as in NumPy
    "add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow", "maximum": "Max", "minimum": "Min",
    "lt": "Less", "le": "LessOrEqual", "gt": "Greater", "ge": "GreaterOrEqual", "eq": "Equal",
    "logical_and": "And", "logical_or": "Or", "matmul": "MatMul", "where": "Where",
}


def _simple(op_type: str) -> Lower:
    def lower(ctx: Lowering, node: Node, ins: list) -> str:
        return ctx.b.op(op_type, ins, hint=node.prim.name)

    return lower


# ---- elementwise odds and ends ---------------------------------------------------------
def _log1p(ctx: Lowering, node: Node, ins: list) -> str:
    one = ctx.b.const(np.array(1, dtype=node.out.dtype.np))
    return ctx.b.op("Log", [ctx.b.op("Add", [ins[0], one])], hint="log1p")


def _ne(ctx: Lowering, node: Node, ins: list) -> str:
    return ctx.b.op("Not", [ctx.b.op("Equal", ins)], hint="ne")


def _floor_divide(ctx: Lowering, node: Node, ins: list) -> str:
    a, b = ins
    if node.out.dtype.is_floating_point:
        return ctx.b.op("Floor", [ctx.b.op("Div", [a, b])], hint="floor_divide")
    # integers: ONNX Div truncates; (a - mod(a, b)) is a multiple of b, so its quotient is exact
    remainder = ctx.b.op("Mod", [a, b], fmod=0)  # Python's sign convention (follows b)
    return ctx.b.op("Div", [ctx.b.op("Sub", [a, remainder]), b], hint="floor_divide")


def _cast(ctx: Lowering, node: Node, ins: list) -> str:
    return ctx.b.op("Cast", ins, hint="cast", to=onnx_type(get_dtype(node.params["dtype"])))


# ---- creation -------------------------------------------------------------------------
def _full(ctx: Lowering, node: Node, ins: list) -> str:
    dtype = get_dtype(node.params["dtype"])
    value, shape = node.params["value"], ctx.b.shape_tensor(node.params["shape"])
    if is_symbolic(value):  # e.g. the 1/B of a mean over a dynamic dim: computed at run time
        scalar = ctx.b.op("Reshape", [ctx.b.number(value, dtype), ctx.b.int64s([])], hint="value")
        return ctx.b.op("Expand", [scalar, shape], hint="full")
    fill = helper.make_tensor("value", onnx_type(dtype), [1], [np.asarray(value, dtype.np).item()])
    return ctx.b.op("ConstantOfShape", [shape], hint="full", value=fill)


def _arange(ctx: Lowering, node: Node, ins: list) -> str:
    p = node.params
    dtype = get_dtype(p["dtype"])
    bounds = [p["start"], p["stop"], p["step"]]
    if is_symbolic(bounds):
        names = [ctx.b.op("Reshape", [ctx.b.number(v, dtype), ctx.b.int64s([])], hint="range") for v in bounds]
    else:
        names = [ctx.b.const(np.array(v, dtype=dtype.np), "range") for v in bounds]
    return ctx.b.op("Range", names, hint="arange")


# ---- movement -------------------------------------------------------------------------
def _reshape(ctx: Lowering, node: Node, ins: list) -> str:
    shape = node.params["shape"]
    attrs = {"allowzero": 1} if ctx.opset >= 14 and any(d == 0 for d in shape) else {}
    return ctx.b.op("Reshape", [ins[0], ctx.b.shape_tensor(shape)], hint="reshape", **attrs)


def _permute(ctx: Lowering, node: Node, ins: list) -> str:
    return ctx.b.op("Transpose", ins, hint="permute", perm=list(node.params["perm"]))


def _expand(ctx: Lowering, node: Node, ins: list) -> str:
    return ctx.b.op("Expand", [ins[0], ctx.b.shape_tensor(node.params["shape"])], hint="expand")


def _pad(ctx: Lowering, node: Node, ins: list) -> str:
    pads = node.params["pads"]
    amounts = ctx.b.shape_tensor([lo for lo, _ in pads] + [hi for _, hi in pads])
    value = node.params["value"]
    if is_symbolic(value):
        value = ctx.b.op("Reshape", [ctx.b.number(value, node.out.dtype), ctx.b.int64s([])], hint="pad_value")
    else:
        value = ctx.b.const(np.array(value, dtype=node.out.dtype.np), "pad_value")
    return ctx.b.op("Pad", [ins[0], amounts, value], hint="pad", mode="constant")


def _concat(ctx: Lowering, node: Node, ins: list) -> str:
    axis = node.params["axis"] % len(node.out.shape)
    return ctx.b.op("Concat", ins, hint="concat", axis=axis)


def _flip(ctx: Lowering, node: Node, ins: list) -> str:
    axes = [a % len(node.out.shape) for a in node.params["axes"]]
    n = len(axes)
    return ctx.b.op("Slice", [ins[0], ctx.b.int64s([-1] * n), ctx.b.int64s([INT64_MIN] * n), ctx.b.int64s(axes),
                              ctx.b.int64s([-1] * n)], hint="flip")


def _gather(ctx: Lowering, node: Node, ins: list) -> str:
    return ctx.b.op("GatherElements", ins, hint="gather", axis=node.params["axis"])


def _scatter_add(ctx: Lowering, node: Node, ins: list) -> str:
    if ctx.opset < 16:
        ctx.unsupported(node, f"ScatterElements with reduction='add' needs opset >= 16, got opset {ctx.opset}")
    return ctx.b.op("ScatterElements", ins, hint="scatter_add", axis=node.params["axis"], reduction="add")


# ---- reductions -----------------------------------------------------------------------
def _reduce(op_type: str, axes_input_from: int) -> Lower:
    """ReduceX over node.params['axes']; `axes` is an input from opset `axes_input_from`, else an attribute."""
    def lower(ctx: Lowering, node: Node, ins: list) -> str:
        axes = list(node.params["axes"])
        keepdims = int(bool(node.params["keepdims"]))
        x = ins[0]
        if node.inputs[0].dtype.name == "bool":  # kiln counts bools: reduce them as int64
            x = ctx.b.op("Cast", [x], to=onnx_type(node.out.dtype))
        if not axes:  # reducing no axis is the identity (ONNX would reduce all of them)
            return ctx.b.op("Identity", [x], hint=node.prim.name)
        if ctx.opset >= axes_input_from:
            return ctx.b.op(op_type, [x, ctx.b.int64s(axes)], hint=node.prim.name, keepdims=keepdims)
        return ctx.b.op(op_type, [x], hint=node.prim.name, axes=axes, keepdims=keepdims)

    return lower


def _argmax(ctx: Lowering, node: Node, ins: list) -> str:
    axis, keepdims = node.params["axis"], node.params["keepdims"]
    if axis is not None:
        return ctx.b.op("ArgMax", ins, hint="argmax", axis=axis, keepdims=int(bool(keepdims)))
    flat = ctx.b.op("Reshape", [ins[0], ctx.b.int64s([-1])], hint="flat")
    index = ctx.b.op("ArgMax", [flat], hint="argmax", axis=0, keepdims=0)
    if keepdims:
        return ctx.b.op("Reshape", [index, ctx.b.int64s([1] * len(node.inputs[0].shape))], hint="argmax")
    return index


def _cumsum(ctx: Lowering, node: Node, ins: list) -> str:
    return ctx.b.op("CumSum", [ins[0], ctx.b.int64_scalar(node.params["axis"])], hint="cumsum")


# ---- linear algebra -------------------------------------------------------------------
def _einsum(ctx: Lowering, node: Node, ins: list) -> str:
    a, b, out = parse_einsum(node.params["spec"])
    return ctx.b.op("Einsum", ins, hint="einsum", equation=f"{a},{b}->{out}")


# ---- windows --------------------------------------------------------------------------
def _conv2d(ctx: Lowering, node: Node, ins: list) -> str:
    """The conv2d primitive (one group, zero padding, no bias) is ONNX's Conv."""
    p = node.params
    (kh, kw), (ph, pw) = node.inputs[1].shape[2:], p["padding"]
    return ctx.b.op("Conv", ins, hint="conv", kernel_shape=[int(kh), int(kw)], strides=list(p["stride"]),
                    pads=[ph, pw, ph, pw], dilations=list(p["dilation"]), group=1)


def _unfold2d(ctx: Lowering, node: Node, ins: list) -> str:
    """Generic im2col: pad, flatten H*W, and Gather every window position with a constant index.

    Exact for any dtype and pad value (no arithmetic). Convolutions and max pooling
    never get here: kiln/onnx/patterns.py turns them into Conv and MaxPool first.
    """
    p = node.params
    h, w = node.inputs[0].shape[2:]
    if any(getattr(d, "expr", None) is not None for d in (h, w)):
        ctx.unsupported(node, "the window positions need a static height and width; make only the batch "
                              "(and channel) dims dynamic")
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = p["kernel"], p["stride"], p["padding"], p["dilation"]
    x = ins[0]
    if ph or pw:
        pads = ctx.b.int64s([0, 0, ph, pw, 0, 0, ph, pw])
        value = ctx.b.const(np.array(p["pad_value"], dtype=node.out.dtype.np), "pad_value")
        x = ctx.b.op("Pad", [x, pads, value], hint="unfold_pad", mode="constant")
    hp, wp = int(h) + 2 * ph, int(w) + 2 * pw
    oh, ow = node.out.shape[4], node.out.shape[5]
    rows = (np.arange(kh) * dh)[:, None, None, None] + (np.arange(oh) * sh)[None, None, :, None]
    cols = (np.arange(kw) * dw)[None, :, None, None] + (np.arange(ow) * sw)[None, None, None, :]
    index = ctx.b.const((rows * wp + cols).astype(np.int64), "unfold_index")
    flat = ctx.b.op("Reshape", [x, ctx.b.int64s([0, 0, hp * wp])], hint="unfold_flat")
    cols = ctx.b.op("Gather", [flat, index], hint="unfold2d", axis=2)
    if p.get("batch_axis", 0) == 3:  # (C, kh, kw, N, OH, OW)
        cols = ctx.b.op("Transpose", [cols], hint="unfold_batch_axis", perm=[1, 2, 3, 0, 4, 5])
    return cols


def _check(ctx: Lowering, node: Node, ins: list) -> str:
    """A runtime check (kiln/ops/checks.py) is the identity on values: its output is its input.

    ONNX has no op that raises on bad data, so no node is emitted and the exported model does
    not check: there, as ONNX defines them, Gather takes negative indices from the end and an
    integer division by zero is undefined.
    """
    return ins[0]


def _random(ctx: Lowering, node: Node, ins: list) -> str:
    ctx.unsupported(node, "random ops cannot be exported (ONNX has no counter-based generator); export the "
                          "model in eval mode, where dropout is off")
    raise AssertionError  # unreachable: unsupported() raises


SYMBOLIC_PARAMS = frozenset({"full", "arange", "reshape", "expand", "pad", "index",
                             "check_index", "check_targets", "check_divisor"})
"""The lowerings that compute params holding dynamic dims (SymInts) at run time (the checks ignore
theirs); others refuse them."""

LOWERINGS: dict[str, Lower] = {
    **{name: _simple(op) for name, op in UNARY.items()},
    **{name: _simple(op) for name, op in BINARY.items()},
    "log1p": _log1p, "ne": _ne, "floor_divide": _floor_divide, "cast": _cast,
    "full": _full, "arange": _arange,
    "reshape": _reshape, "permute": _permute, "expand": _expand, "pad": _pad, "concat": _concat,
    "flip": _flip, "gather": _gather, "scatter_add": _scatter_add, "index": lower_index,
    "sum": _reduce("ReduceSum", 13), "max": _reduce("ReduceMax", 18), "prod": _reduce("ReduceProd", 18),
    "argmax": _argmax, "cumsum": _cumsum, "einsum": _einsum, "unfold2d": _unfold2d, "conv2d": _conv2d,
    "check_index": _check, "check_targets": _check, "check_divisor": _check, "check_probability": _check,
    "uniform": _random, "normal": _random,
}

SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(name for name, fn in LOWERINGS.items() if fn is not _random))
"""Every primitive with an ONNX mapping (random ops are listed in LOWERINGS only to explain the error)."""

