"""The IR: a `Graph` of primitive `Node`s over typed `Value`s, printable as xpr text.

A graph has ordered inputs (each with an `InputSpec` saying where its data comes
from on every call: a call argument, a module parameter or buffer, a captured
tensor, or the random stream), nodes in topological order, outputs, and state
writes (values copied back into buffers after each call, e.g. BatchNorm stats).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from ..dtypes import DType
from ..ops.primitive import Primitive
from .symbolic import dim_text

_SHORT = {"float32": "f32", "float64": "f64", "float16": "f16", "int32": "i32", "int64": "i64", "bool": "bool"}
_ids = itertools.count()


class Value:
    """One tensor-valued SSA variable: shape (ints or symbolic dims), dtype and device."""

    __slots__ = ("id", "shape", "dtype", "device")

    def __init__(self, shape: tuple, dtype: DType, device: Any = "cpu"):
        self.id = next(_ids)
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device

    def type_str(self) -> str:
        dims = ",".join(dim_text(d) for d in self.shape)  # B*2, not the traced size
        return f"{_SHORT.get(self.dtype.name, self.dtype.name)}[{dims}]"

    def __repr__(self) -> str:
        return f"%{self.id}:{self.type_str()}"


@dataclass
class InputSpec:
    """Where an input's data comes from on each call.

    kind: "arg" (ref = leaf index in the flattened call arguments), "param" / "buffer"
    (ref = the tensor, name = its module path), "captured" (ref = the tensor; read
    fresh on each call), "rng" (ref = (generator, count): a fresh [seed, offset] key).
    """

    kind: str
    ref: Any = None
    name: str = ""
    literal: Any = None  # for small captured constants: the value seen at trace time


class Node:
    """One primitive application: out = prim(*inputs, **params)."""

    __slots__ = ("prim", "inputs", "params", "out")

    def __init__(self, prim: Primitive, inputs: list[Value], params: dict, out: Value):
        self.prim = prim
        self.inputs = list(inputs)
        self.params = params
        self.out = out

    def __repr__(self) -> str:
        return f"{self.out!r} = {self.prim.name}({', '.join(repr(v) for v in self.inputs)})"


@dataclass
class StateWrite:
    """After each call, copy `value` into `target` (a buffer, a captured tensor or an argument)."""

    kind: str  # "tensor" (ref is the tensor object) or "arg" (ref is the arg leaf index)
    ref: Any
    value: Value


@dataclass
class Graph:
    """A traced program: inputs, nodes in topological order, outputs, state writes."""

    inputs: list[Value] = field(default_factory=list)
    specs: list[InputSpec] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    state_writes: list[StateWrite] = field(default_factory=list)
    requires_grad: set = field(default_factory=set)  # ids of values that carry gradient

    def copy(self) -> "Graph":
        """A shallow copy whose node list and outputs can be edited independently."""
        g = Graph(list(self.inputs), list(self.specs),
                  [Node(n.prim, n.inputs, n.params, n.out) for n in self.nodes],
                  list(self.outputs), [StateWrite(w.kind, w.ref, w.value) for w in self.state_writes],
                  set(self.requires_grad))
        return g

    # ---- queries ------------------------------------------------------------------
    def producers(self) -> dict[int, Node]:
        return {n.out.id: n for n in self.nodes}

    def users(self) -> dict[int, list[Node]]:
        out: dict[int, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v.id, []).append(n)
        return out

    def live_roots(self) -> list[Value]:
        return list(self.outputs) + [w.value for w in self.state_writes]

    def input_ids(self) -> set[int]:
        """Ids of the graph's input values (args, params, buffers, captured, literals, rng)."""
        return {v.id for v in self.inputs}

    def literal_values(self) -> dict[int, Any]:
        """Value id -> baked array, for inputs whose data is a compile-time literal."""
        return {v.id: s.literal for v, s in zip(self.inputs, self.specs) if s.literal is not None}

    def signature(self) -> tuple:
        """A structural fingerprint: equal for graphs that compute the same way."""
        names = _Namer(self)
        parts = [tuple((v.type_str(), s.kind) for v, s in zip(self.inputs, self.specs))]
        for n in self.nodes:
            parts.append((n.prim.name, tuple(names(v) for v in n.inputs), param_key(n.params), n.out.type_str()))
        parts.append(tuple(names(v) for v in self.outputs))
        parts.append(tuple((w.kind, names(w.value)) for w in self.state_writes))
        return tuple(parts)

    def structure_hash(self) -> int:
        return hash(self.signature())

    def replace_uses(self, old: Value, new: Value) -> None:
        """Point every use of `old` (in nodes, outputs, state writes) at `new`."""
        for n in self.nodes:
            if any(v is old for v in n.inputs):
                n.inputs = [new if v is old else v for v in n.inputs]
        self.outputs = [new if v is old else v for v in self.outputs]
        self.state_writes = [StateWrite(w.kind, w.ref, new) if w.value is old else w for w in self.state_writes]

    # ---- printing -----------------------------------------------------------------
    def __str__(self) -> str:
        return self.to_text()

    def to_text(self) -> str:
        """The graph in xpr form: ``{ lambda a:f32[B,784] ; let ... in (e) }``."""
        names = _Namer(self)
        header = " ".join(f"{names(v)}:{v.type_str()}" for v, s in zip(self.inputs, self.specs)
                          if s.literal is None)
        lines = []
        for n in self.nodes:
            args = " ".join(names(v) for v in n.inputs)
            params = _format_params(n.params)
            lines.append(f"{names(n.out)}:{n.out.type_str()} = {n.prim.name}{params}{' ' + args if args else ''}")
        outs = ", ".join(names(v) for v in self.outputs)
        text = "{ lambda " + header + " ;\n"
        if lines:
            text += "  let " + "\n      ".join(lines) + "\n"
        for w in self.state_writes:
            text += f"  write {self._write_target(w)} <- {names(w.value)}\n"
        return text + f"  in ({outs}) }}"

    def _write_target(self, w: StateWrite) -> str:
        """How a state write's target reads: ``arg[0]``, or the buffer's module path."""
        if w.kind == "arg":
            return f"arg[{w.ref}]"
        for s in self.specs:
            if s.ref is w.ref and s.kind in ("param", "buffer", "captured"):
                return s.name or s.kind
        return "buffer"

    def to_dot(self) -> str:
        """Graphviz DOT source for a picture of the graph (``dot -Tpng``)."""
        names = _Namer(self)
        out = ["digraph kiln {", "  rankdir=TB;", '  node [shape=box, fontname="monospace"];']
        for v, s in zip(self.inputs, self.specs):
            label = f"{names(v)}: {v.type_str()}\\n{s.kind}{(' ' + s.name) if s.name else ''}"
            out.append(f'  v{v.id} [label="{label}", shape=ellipse];')
        for n in self.nodes:
            out.append(f'  v{n.out.id} [label="{names(n.out)} = {n.prim.name}\\n{n.out.type_str()}"];')
            for v in n.inputs:
                out.append(f"  v{v.id} -> v{n.out.id};")
        for i, v in enumerate(self.outputs):
            out.append(f'  out{i} [label="output {i}", shape=ellipse, style=bold];')
            out.append(f"  v{v.id} -> out{i};")
        out.append("}")
        return "\n".join(out)


class _Namer:
    """Short names a, b, ..., z, ba, bb, ... in order of first appearance; literals print as values."""

    def __init__(self, graph: Graph):
        self.names: dict[int, str] = {}
        self.literals = {v.id: s.literal for v, s in zip(graph.inputs, graph.specs) if s.literal is not None}
        for v, s in zip(graph.inputs, graph.specs):
            if s.literal is None:
                self(v)
        for n in graph.nodes:
            self(n.out)

    def __call__(self, v: Value) -> str:
        if v.id in self.literals:
            return _format_literal(self.literals[v.id])
        name = self.names.get(v.id)
        if name is None:
            name = self.names[v.id] = _letters(len(self.names))
        return name


def _letters(i: int) -> str:
    s = ""
    while True:
        s = chr(ord("a") + i % 26) + s
        i //= 26
        if i == 0:
            return s


def _format_literal(value: Any) -> str:
    arr = np.asarray(value)
    if arr.size != 1:
        return "const" + repr(arr.tolist()).replace(" ", "")
    arr = arr.reshape(())
    if arr.dtype.kind == "f":
        return str(arr[()])  # shortest form at its own precision: 0.9, not 0.8999999761581421
    if arr.dtype.kind == "b":
        return repr(bool(arr))
    return repr(int(arr))


def _format_params(params: dict) -> str:
    shown = {k: v for k, v in params.items() if k != "device"}
    if not shown:
        return ""
    return "[" + " ".join(f"{k}={_short(v)}" for k, v in shown.items()) + "]"


def _short(v: Any) -> str:
    if isinstance(v, tuple):
        return "(" + ",".join(_short(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return dim_text(v)


def param_key(params: dict) -> tuple:
    """A hashable key for node params that distinguishes symbolic dims from equal ints."""
    return tuple((k, _param_item_key(v)) for k, v in sorted(params.items()))


def _param_item_key(v: Any) -> Any:
    if isinstance(v, (tuple, list)):
        return tuple(_param_item_key(x) for x in v)
    expr = getattr(v, "expr", None)
    if expr is not None:
        return ("sym", str(expr))
    if isinstance(v, float):
        return ("float", repr(v))  # keeps 0.0 and -0.0 apart, and nan equal to itself
    return (type(v).__name__, v) if isinstance(v, (int, float, bool, str, type(None))) else repr(v)


def values_of(nodes: Iterable[Node]) -> list[Value]:
    return [n.out for n in nodes]
