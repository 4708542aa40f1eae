"""The native runtime: a plan replayed as few calls into one generated C library.

`plan_for(graph)` lowers an optimized graph in four steps:

1. fuse: row kernels and elementwise groups, even for tiny arrays and single nodes
   (inside generated code a small kernel costs nothing to call);
2. analyze (segment.py): which nodes C runs, the schedule, and where each value lives;
3. render (segcode.py): one C function per *segment* (a maximal run of native nodes),
   compiled into one library, cached on disk like every kernel (toolchain.py);
4. drive: a generated Python function (`plan.driver`) that allocates the call's fresh
   outputs, calls each segment once with a tuple of the arrays it touches and the
   thread's arena, and runs the remaining nodes' NumPy kernels between segments.

A whole MLP forward, or its backward graph, is then one native call.

Exactness: every native node computes exactly what its NumPy kernel computes (bit for
bit) for the operand layouts it was generated for. Those are static: graph inputs are
taken to be C-contiguous, unless a call shows other strides (a residual the forward
plan returns as a transposed view of a weight); then a *variant* is generated for the
layouts seen (up to MAX_VARIANTS per plan) and used while they last. The segments check
their arrays on every call. A call whose arrays fit no variant (a NumPy step returned
another layout, a dtype changed), or where a row kernel meets a row it cannot decide (a
maximum that is a zero of both signs), is run again by the reference plan: the
backend's Python replay of the same graph, built on first need.

Memory: plan outputs never share memory with the arena, so a later call cannot
overwrite a result a caller holds; each thread has its own arena, so threads may call
one plan at once.
"""
from __future__ import annotations

import ctypes
import re
import threading
from typing import Any, Callable

import numpy as np

from ...ir import Graph, Node, Value
from . import toolchain
from .arena import Arena, ArenaPool
from .blas import FUNCTIONS, numpy_blas
from .fusing import fuse
from .objects import descr_table, layout_problem, object_layout
from .segcode import SETUP, render_plan
from .segment import Analysis, analyze
from .views import Layout

MAX_VARIANTS = 4  # input layouts one plan generates code for before it leaves new ones to the reference

_bound_lock = threading.Lock()
_bound: set[int] = set()  # handles of libraries whose kiln_setup ran


def _bind(lib: ctypes.CDLL) -> None:
    """Run the library's setup once per process (NumPy's BLAS, the type objects of the argument checks)."""
    with _bound_lock:
        if lib._handle in _bound:
            return
        blas = numpy_blas()
        table = (ctypes.c_void_p * len(FUNCTIONS))(*(blas.table() if blas else [0] * len(FUNCTIONS)))
        types = descr_table()
        type_table = (ctypes.c_void_p * len(types))(*types)
        setup = getattr(lib, SETUP)
        setup.restype = None
        setup.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        setup(ctypes.cast(table, ctypes.c_void_p), ctypes.cast(type_table, ctypes.c_void_p))
        _bound.add(lib._handle)


class Variant:
    """The code of one plan for one set of input layouts: its analysis, C library and Python driver."""

    def __init__(self, plan: "NativePlan", analysis: Analysis):
        self.analysis = analysis
        blas = numpy_blas()
        layout = object_layout()
        assert layout is not None
        self.source, self.segment_args, self.row_nodes = render_plan(analysis, layout,
                                                                     blas.int_type if blas else None)
        lib = toolchain.build(self.source, SETUP)
        _bind(lib)
        self._lib = lib
        self.segments = []
        for k in range(len(self.segment_args)):
            fn = getattr(lib, f"kiln_segment_{k}")
            fn.restype = ctypes.c_longlong
            fn.argtypes = [ctypes.py_object, ctypes.c_void_p]
            self.segments.append(fn)
        self.native_inputs = analysis.native_inputs()
        self._arena_views: dict[int, tuple[int, tuple, np.dtype]] = {}
        self.driver, self.run = self._generate(plan)
        views, nbytes = self._arena_views, analysis.arena_bytes
        self._pool = ArenaPool(lambda: Arena(nbytes, views))
        self._namespace["pool"] = self._pool.get

    def fits(self, inputs: list) -> bool:
        """Whether this call's graph inputs have the layouts this variant was generated for."""
        a = self.analysis
        graph = a.graph
        for i in self.native_inputs:
            x = inputs[i]
            v = graph.inputs[i]
            if not _array_fits(x, v) or _input_layout(x, v) != a.input_layouts.get(i):
                return False
        return True

    # ---- the Python driver ------------------------------------------------------------------
    def _generate(self, plan: "NativePlan") -> tuple[str, Any]:
        a = self.analysis
        graph = a.graph
        ns: dict[str, Any] = {"xp": np, "empty": np.empty, "asarray": np.asarray, "miss": plan._miss}
        self._namespace = ns
        names: dict[int, str] = {v.id: f"i{k}" for k, v in enumerate(graph.inputs)}
        lines = ["def run(inputs, dims):"]
        if graph.inputs:
            lines.append("    " + ", ".join(names[v.id] for v in graph.inputs) + ", = inputs")
        lines += ["    A = pool()", "    V = A.views"]
        body: list[str] = []
        counter = [0]

        def const(value: Any) -> str:
            counter[0] += 1
            ns[f"c{counter[0]}"] = value
            return f"c{counter[0]}"

        def materialize(v: Value) -> str:
            """The Python name holding v's array, emitting what computes it (a view, an arena view)."""
            if v.id in names:
                return names[v.id]
            node = a.producer[v.id]
            name = f"v{v.id}"
            if a.kinds[id(node)] == "view":
                src = materialize(node.inputs[0])
                params = "".join(f", {k}={const(p)}" for k, p in node.params.items())
                body.append(f"    {name} = {const(node.prim.kernel)}(xp, {src}{params})")
            else:  # a native result in the arena (fresh ones are named where they are allocated)
                buf = a.buffers[v.id]
                assert buf.kind == "arena", (v, buf.kind)
                self._arena_views[v.id] = (buf.offset, tuple(v.shape), v.dtype.np)
                body.append(f"    {name} = V[{v.id}]")
            names[v.id] = name
            return name

        segment = 0
        for kind, nodes in a.units():
            if kind == "python":
                (node,) = nodes
                args = [materialize(v) for v in node.inputs]
                params = [f"{k}={const(p)}" for k, p in node.params.items()]
                names[node.out.id] = f"v{node.out.id}"
                body.append(f"    v{node.out.id} = {const(node.prim.kernel)}({', '.join(['xp', *args, *params])})")
                continue
            for node in nodes:
                for v in a.native_outputs.get(id(node), []):
                    if a.buffers[v.id].kind == "fresh":
                        names[v.id] = f"v{v.id}"
                        body.append(f"    v{v.id} = empty({tuple(int(d) for d in v.shape)!r}, {const(v.dtype.np)})")
            args = [names[key] if a.buffers[key].value.shape else f"asarray({names[key]})"
                    for key in self.segment_args[segment]]
            body += [f"    rc = seg{segment}(({', '.join(args)},), A.address)",
                     "    if rc: return miss(rc, inputs, dims)"]
            ns[f"seg{segment}"] = self.segments[segment]
            segment += 1
        outs = []
        for v in graph.outputs:
            name = materialize(v)
            if v.id in names and v in graph.inputs and graph.specs[graph.inputs.index(v)].kind != "arg":
                outs.append(f"asarray({name}).copy()")  # a parameter or constant: never hand out its memory
            else:
                outs.append(name if v.shape else f"asarray({name})")
        writes = [materialize(w.value) for w in graph.state_writes]
        lines += _with_frees(body, " ".join(outs + writes))
        lines.append(f"    return [{', '.join(outs)}], [{', '.join(writes)}]")
        source = "\n".join(lines) + "\n"
        exec(compile(source, f"<kiln native plan {id(self):x}>", "exec"), ns)  # noqa: S102 - our own source
        return source, ns["run"]


_NAME = re.compile(r"\bv\d+\b")


def _with_frees(body: list[str], kept: str) -> list[str]:
    """`body` with ``del`` after the last line that reads each value name, so NumPy results and views are
    freed as soon as they are dead (as the interpreter frees them); names the return reads stay."""
    keep = set(_NAME.findall(kept))
    last: dict[str, int] = {}
    for i, line in enumerate(body):
        for name in _NAME.findall(line):
            last[name] = i
    frees: dict[int, list[str]] = {}
    for name, i in last.items():
        if name not in keep:
            frees.setdefault(i, []).append(name)
    out = []
    for i, line in enumerate(body):
        out.append(line)
        if i in frees:
            out.append("    del " + ", ".join(sorted(frees[i])))
    return out


def _array_fits(x: Any, v: Value) -> bool:
    """Whether `x` can be read by generated code as graph input `v` (some layout of the right kind)."""
    if x.__class__ is not np.ndarray or x.dtype is not np.dtype(v.dtype.np) or x.shape != tuple(v.shape):
        return False
    return x.flags.aligned and all(s % x.itemsize == 0 for s in x.strides)


def _input_layout(x: np.ndarray, v: Value) -> Layout | None:
    """None for a C-contiguous array, else its layout (element strides)."""
    if x.flags.c_contiguous:
        return None
    return Layout(tuple(v.shape), tuple(s // x.itemsize for s in x.strides), 0)


class NativePlan:
    """A graph lowered to native segments and NumPy steps (see the module docstring).

    `run(inputs, dims)` is the Plan interface. `graph` is the fused graph it runs, `source`
    the C of its segments and `driver` the Python that calls them (for the layouts of the
    first variant, and of later ones after it), `analysis` what went where (segment.py),
    `segments` how many native calls a replay makes, and `fallback_calls` how many calls
    the reference plan answered.
    """

    backend = "cpu"

    def __init__(self, graph: Graph, fused: Graph, analysis: Analysis, reference: Callable[[], Any]):
        self.original = graph
        self.graph = fused
        self._make_reference = reference
        self._reference: Any = None
        self._lock = threading.Lock()
        self.fallback_calls = 0
        self.variants = [Variant(self, analysis)]
        self._current = self.variants[0].run

    @property
    def analysis(self) -> Analysis:
        return self.variants[0].analysis

    @property
    def source(self) -> str:
        return "\n".join(v.source for v in self.variants)

    @property
    def driver(self) -> str:
        return "\n".join(v.driver for v in self.variants)

    @property
    def segments(self) -> int:
        return len(self.variants[0].segments)

    def run(self, inputs: list, dims: dict[str, int] | None = None) -> tuple[list, list]:
        """Execute on input arrays; returns (output arrays, state-write arrays)."""
        if dims is not None:
            return self._fallback(inputs, dims)
        return self._current(inputs, dims)

    def _miss(self, code: int, inputs: list, dims: dict[str, int] | None) -> tuple[list, list]:
        """A segment refused this call: run the variant for these layouts (made if need be), or the reference.

        Code 1: an array did not fit; 2 + k: row kernel k of the running variant met a row it
        cannot decide (counted in that kernel's `fallbacks`, as when it runs on its own)."""
        if code >= 2:
            for variant in self.variants:
                if variant.run is self._current and code - 2 < len(variant.row_nodes):
                    variant.row_nodes[code - 2].prim.fallbacks += 1
        if code == 1:
            for variant in self.variants:
                if variant.fits(inputs):
                    if variant.run is self._current:
                        break  # the layouts fit but another array did not (a NumPy step's result)
                    self._current = variant.run
                    return variant.run(inputs, dims)
            else:
                variant = self._new_variant(inputs)
                if variant is not None:
                    self._current = variant.run
                    return variant.run(inputs, dims)
        return self._fallback(inputs, dims)

    def _new_variant(self, inputs: list) -> Variant | None:
        first = self.variants[0].analysis
        graph = first.graph
        layouts = {}
        for i in first.native_inputs():
            x, v = inputs[i], graph.inputs[i]
            if not _array_fits(x, v):
                return None
            layout = _input_layout(x, v)
            if layout is not None:
                layouts[i] = layout
        with self._lock:
            if len(self.variants) >= MAX_VARIANTS:
                return None
            for variant in self.variants:  # made by another thread meanwhile
                if variant.analysis.input_layouts == layouts:
                    return variant
            variant = Variant(self, analyze(graph, layouts))
            self.variants.append(variant)
            return variant

    def _fallback(self, inputs: list, dims: dict[str, int] | None) -> tuple[list, list]:
        """The call run by the reference plan."""
        self.fallback_calls += 1
        return self.reference().run(inputs, dims)

    def reference(self) -> Any:
        """The reference plan for this graph (built on first use)."""
        with self._lock:
            if self._reference is None:
                self._reference = self._make_reference()
            return self._reference


def native_problem(graph: Graph) -> str | None:
    """Why a graph cannot get a native plan here, or None."""
    problem = layout_problem()
    if problem is not None:
        return f"generated code cannot read Python objects here: {problem}"
    return None


def plan_for(graph: Graph, reference: Callable[[], Any]) -> NativePlan | None:
    """A NativePlan for `graph`, or None when no node of it would run natively (or it cannot here)."""
    if native_problem(graph) is not None:
        return None
    fused = fuse(graph, min_elements=1, min_nodes=1)
    analysis = analyze(fused)
    if not any(kind == "segment" for kind, _ in analysis.units()):
        return None
    return NativePlan(graph, fused, analysis, reference)
