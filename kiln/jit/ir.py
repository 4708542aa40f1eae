"""The IR: a `Graph` of primitive `Node`s over typed `Value`s, printable as xpr text.

A graph has ordered inputs (each with an `InputSpec` saying where its data comes
from on every call: a call argument, a module parameter or buffer, a captured
tensor, or the random stream), nodes in topological order, outputs, and state
writes (values copied back into buffers after each call, e.g. BatchNorm stats).
"""
from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from ..dtypes import DType
from ..ops.primitive import AbstractValue, Primitive
from ..trace_state import trace_state
from .symbolic import dim_text

_SHORT = {"float32": "f32", "float64": "f64", "float16": "f16", "int32": "i32", "int64": "i64", "bool": "bool"}
_ids = itertools.count()
LITERAL_PRINT_LIMIT = 8  # literals with more elements print as ``f32[1024]{...#crc}``, not their values


class GraphVerificationError(ValueError):
    """`Graph.verify` found a broken graph: a value used before (or without) its definition,
    an output nothing defines, or a node whose shape or dtype disagrees with its primitive's
    abstract rule. The message names the node (as its xpr line), the pass that ran last
    when known, what was expected and what was found; the parts are also attributes."""

    def __init__(self, problem: str, *, node_text: str | None = None, node_index: int | None = None,
                 pass_name: str | None = None, expected: str | None = None, found: str | None = None,
                 where: str | None = None):
        self.problem = problem
        self.node_text = node_text
        self.node_index = node_index
        self.pass_name = pass_name
        self.expected = expected
        self.found = found
        where = where or (f"after pass {pass_name}" if pass_name else None)
        parts = [f"invalid graph{f' ({where})' if where else ''}: {problem}"]
        if node_text is not None:
            parts.append(f"  at node {node_index}: {node_text}")
        if expected is not None or found is not None:
            parts.append(f"  expected: {expected}")
            parts.append(f"  found:    {found}")
        super().__init__("\n".join(parts))


def type_text(shape: tuple, dtype: Any) -> str:
    """A type as xpr text: ``f32[B,784]`` (symbolic dims print as their expression, not the traced size)."""
    name = getattr(dtype, "name", str(dtype))
    return f"{_SHORT.get(name, name)}[{','.join(dim_text(d) for d in shape)}]"


class Value:
    """One tensor-valued SSA variable: shape (ints or symbolic dims), dtype and device."""

    __slots__ = ("id", "shape", "dtype", "device")

    def __init__(self, shape: tuple, dtype: DType, device: Any = "cpu"):
        self.id = next(_ids)
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device

    def type_str(self) -> str:
        return type_text(self.shape, self.dtype)

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

    def rename_inputs(self, mapping: Mapping[int, "Value"]) -> None:
        """Point each input whose id is a key of `mapping` at the value it maps to."""
        if any(v.id in mapping for v in self.inputs):
            self.inputs = [mapping.get(v.id, v) for v in self.inputs]


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
    last_pass = None  # not a field: run_pass sets it to the name of the pass that returned this graph
    # not a field: value id -> element strides of the array the trace saw for a node's result when it
    # was not C-contiguous (build.py sets it before lowering; a backend may expect those layouts)
    observed_strides: dict | None = None

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
        names = _Namer(self, exact=True)
        parts = [tuple((v.type_str(), s.kind) for v, s in zip(self.inputs, self.specs))]
        for n in self.nodes:
            parts.append((n.prim.name, tuple(names(v) for v in n.inputs), param_key(n.params), n.out.type_str()))
        parts.append(tuple(names(v) for v in self.outputs))
        parts.append(tuple((w.kind, names(w.value)) for w in self.state_writes))
        return tuple(parts)

    def structure_hash(self) -> int:
        return hash(self.signature())

    # ---- editing --------------------------------------------------------------------
    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Point every use of `old` (node inputs, outputs, state writes) at `new`, in place.

        Call it on a copy (`copy()`), never on a graph a pass was given.
        """
        self.rename_uses({old.id: new})

    replace_uses = replace_all_uses  # the older name

    def rename_uses(self, mapping: Mapping[int, Value], *, requires_grad: bool = False) -> None:
        """Replace values by id everywhere they are used: ``mapping`` is old value id -> new value.

        Node inputs, outputs and state writes are rewired in place (one lookup per use,
        no chains followed); definitions are left alone, so a replaced node stays until
        dead-node elimination drops it. With ``requires_grad=True`` a new value also
        requires grad when the value it replaces did.
        """
        if not mapping:
            return
        for n in self.nodes:
            n.rename_inputs(mapping)
        if any(v.id in mapping for v in self.outputs):
            self.outputs = [mapping.get(v.id, v) for v in self.outputs]
        if any(w.value.id in mapping for w in self.state_writes):  # new records: copies may share them
            self.state_writes = [StateWrite(w.kind, w.ref, mapping[w.value.id]) if w.value.id in mapping else w
                                 for w in self.state_writes]
        if requires_grad and self.requires_grad:
            self.requires_grad |= {mapping[i].id for i in list(self.requires_grad) if i in mapping}

    # ---- checking -----------------------------------------------------------------
    def verify(self, after: str | None = None, *, where: str | None = None) -> None:
        """Check that the graph is well formed; raise `GraphVerificationError` if it is not.

        Checks: inputs and specs pair up; every node operand is defined earlier (a graph
        input, a literal or an earlier node's output) and every value is defined once;
        outputs and state writes refer to defined values; and each node's shape and dtype
        are what its primitive's abstract rule gives for its operand types and params
        (symbolic dims compare by their expression text: ``B*2`` equals ``B*2``).

        `after` names the pass that produced the graph (default: `last_pass`, which
        `run_pass` sets); `where` replaces the whole "after pass ..." phrase.
        """
        problem = self._first_problem()
        if problem is not None:
            after = after if after is not None else self.last_pass
            raise GraphVerificationError(problem.pop("problem"), pass_name=after, where=where, **problem)

    def _first_problem(self) -> dict | None:
        """The first thing wrong with the graph, as GraphVerificationError's keyword arguments."""
        if len(self.inputs) != len(self.specs):
            return dict(problem="the inputs and their specs differ in number",
                        expected=f"{len(self.inputs)} specs, one per input", found=f"{len(self.specs)} specs")
        defined: set[int] = set()
        for v in self.inputs:
            if v.id in defined:
                return dict(problem=f"input {self._name(v)} is listed twice")
            defined.add(v.id)
        position = {n.out.id: i for i, n in enumerate(self.nodes)}
        saved, trace_state.tracer = trace_state.tracer, None  # abstract rules must not guard a live trace
        try:
            for i, n in enumerate(self.nodes):
                for k, v in enumerate(n.inputs):
                    if v.id not in defined:
                        return self._undefined(v, f"operand {k}", position, i)
                if n.out.id in defined:
                    return self._at(i, f"{self._name(n.out)} is defined twice (each value has one definition)",
                                    expected="a new value", found=f"{self._name(n.out)}, defined before")
                problem = self._type_problem(i, n)
                if problem is not None:
                    return problem
                defined.add(n.out.id)
        finally:
            trace_state.tracer = saved
        for k, v in enumerate(self.outputs):
            if v.id not in defined:
                return self._undefined(v, f"output {k}", position, None)
        for k, w in enumerate(self.state_writes):
            if w.value.id not in defined:
                return self._undefined(w.value, f"state write {k} ({self._write_target(w)})", position, None)
        return None

    def _type_problem(self, i: int, n: Node) -> dict | None:
        """A disagreement between node `i` and its primitive's abstract rule, or None."""
        operands = ", ".join(v.type_str() for v in n.inputs) or "no operands"
        try:
            aval = n.prim.abstract(*[AbstractValue(v.shape, v.dtype) for v in n.inputs], **n.params)
        except NotImplementedError:
            return None  # a primitive without a shape rule (a backend's fused kernel): nothing to compare
        except Exception as exc:  # noqa: BLE001 - the rule rejects the operands: that is the report
            return self._at(i, f"{n.prim.name}'s abstract rule rejects the operands",
                            expected=f"operands that {n.prim.name} accepts",
                            found=f"{operands}: {type(exc).__name__}: {exc}")
        shape_ok = same_shape(tuple(aval.shape), n.out.shape)
        if shape_ok and aval.dtype == n.out.dtype:
            return None
        return self._at(i, f"the {'dtype' if shape_ok else 'shape'} of {self._name(n.out)} disagrees with "
                           f"{n.prim.name}'s abstract rule",
                        expected=f"{type_text(aval.shape, aval.dtype)} ({n.prim.name} of {operands})",
                        found=n.out.type_str())

    def _undefined(self, v: Value, use: str, position: dict[int, int], at: int | None) -> dict:
        """The problem dict for a use of `v` (by node `at`, or an output) with no definition before it."""
        name = self._name(v)
        j = position.get(v.id)
        before = f"node {at}" if at is not None else "the outputs"
        expected = f"{name} defined by an input, a literal or a node before {before}"
        if j is not None:
            problem = f"{use} uses {name} before its definition"
            found = f"{name} defined later, by node {j}: {self._line(self.nodes[j])}"
        else:
            problem = f"{use} uses {name}:{v.type_str()}, which no input, literal or node defines"
            found = f"no definition of {name}"
        if at is None:
            return dict(problem=problem, expected=expected, found=found)
        return self._at(at, problem, expected=expected, found=found)

    def _at(self, i: int, problem: str, **parts: str) -> dict:
        return dict(problem=problem, node_index=i, node_text=self._line(self.nodes[i]), **parts)

    def _name(self, v: Value) -> str:
        return _Namer(self)(v)

    def _line(self, n: Node) -> str:
        return _node_line(_Namer(self), n)

    # ---- printing -----------------------------------------------------------------
    def __str__(self) -> str:
        return self.to_text()

    def to_text(self) -> str:
        """The graph in xpr form: ``{ lambda a:f32[B,784] ; let ... in (e) }``."""
        names = _Namer(self)
        header = " ".join(f"{names(v)}:{v.type_str()}" for v, s in zip(self.inputs, self.specs)
                          if s.literal is None)
        lines = [_node_line(names, n) for n in self.nodes]
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
    """Short names a, b, ..., z, ba, bb, ... in order of first appearance; literals print as values.

    With ``exact=True`` a literal is named by its full content (dtype, shape and bytes), for
    signatures: printed text elides large literals, a signature must tell them apart.
    """

    def __init__(self, graph: Graph, exact: bool = False):
        self.exact = exact
        self.names: dict[int, str] = {}
        self.literals = {v.id: s.literal for v, s in zip(graph.inputs, graph.specs) if s.literal is not None}
        for v, s in zip(graph.inputs, graph.specs):
            if s.literal is None:
                self(v)
        for n in graph.nodes:
            self(n.out)

    def __call__(self, v: Value) -> str:
        if v.id in self.literals:
            if self.exact:
                return _exact_literal(self.literals[v.id])
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


def _node_line(names: "_Namer", n: Node) -> str:
    """One node as an xpr ``let`` line: ``d:f32[2,4] = add c b``."""
    args = " ".join(names(v) for v in n.inputs)
    return f"{names(n.out)}:{n.out.type_str()} = {n.prim.name}{_format_params(n.params)}{' ' + args if args else ''}"


def same_shape(a: tuple, b: tuple) -> bool:
    """Whether two shapes agree dim by dim; a symbolic dim equals one that prints the same (``B*2``)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if getattr(x, "expr", None) is None and getattr(y, "expr", None) is None:
            if x != y:
                return False
        elif dim_text(x) != dim_text(y):
            return False
    return True


def on_gpu(value: Any) -> bool:
    """Whether `value` is a GPU array (CuPy's, by the CUDA array interface)."""
    return not isinstance(value, np.ndarray) and hasattr(value, "__cuda_array_interface__")


def host_array(value: Any) -> np.ndarray:
    """A literal's values as a NumPy array; a GPU (CuPy) literal is copied to the host."""
    if on_gpu(value):
        return value.get()
    return np.asarray(value)


def _exact_literal(value: Any) -> Any:
    arr = host_array(value)
    if arr.size <= LITERAL_PRINT_LIMIT:
        return _format_literal(arr)  # as printed: keeps signatures of small graphs as they were
    return ("literal", arr.dtype.str, arr.shape, np.ascontiguousarray(arr).tobytes())


def _format_literal(value: Any) -> str:
    arr = host_array(value)
    if arr.size > LITERAL_PRINT_LIMIT:
        digest = zlib.crc32(np.ascontiguousarray(arr).tobytes()) & 0xFFFFFFFF
        return f"{type_text(arr.shape, arr.dtype)}{{...#{digest:08x}}}"
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
