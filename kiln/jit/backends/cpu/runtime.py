"""The native runtime: a plan replayed as few calls into one generated C library.

`plan_for(graph)` lowers an optimized graph in four steps:

1. fuse: row kernels and elementwise groups, even for tiny arrays and single nodes
   (inside generated code a small kernel costs nothing to call);
2. analyze (schedule.py): which nodes C runs, the schedule, and where each value lives;
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

A graph with symbolic sizes (dynamic dims) gets one plan for every size (`symbolic_plan_for`,
size_guards.py): its sizes are expressions its segments and driver evaluate per call, its arena is
sized per call, and a call whose sizes answer a comparison of the lowering otherwise, or whose inputs
are not C-contiguous, runs the reference plan.

Code is generated at a plan's first replay (the trace's own call needs none), or when the
plan is made where background builds are off (background.py). Plans of a structure this
process has already made EAGER_PLANS of (a function fed a new shape on every call) run their
first call in Python and generate code at their second (`plan_for`). The compiler then runs
in a worker thread, unless background builds are off or the kernel cache holds the
libraries, and the calls before it finishes run in Python as a lazy plan's first call does,
with the same bits.
"""
from __future__ import annotations

import ctypes
import re
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

from ... import debug
from ...ir import Graph, Node, Value
from ...symbolic import is_symbolic, resolve
from ..interpret import Plan
from ..render.size_text import UnspellableSize, dim_variable, guard_source, py_size
from . import background, toolchain
from .arena import Arena, ArenaPool, GrowingArenaPool
from .blas import FUNCTIONS, numpy_blas
from .fuse_graph import fuse
from .cpython_layout import descr_table, layout_problem, object_layout
from .parallel import available_cpus
from .segcode import render_plan
from ..render.c_plan import SETUP
from ..render.segment_ir import segment_text
from .schedule import Analysis, analyze
from .size_guards import SymbolicSizeUsed, needed_guards, recording_sizes, size_names
from .symbolic_fusion import static_row_seeds
from .toolchain import CompilerUnavailable
from .views import Layout

MAX_VARIANTS = 4  # input layouts one plan generates code for before it leaves new ones to the reference

_bound_lock = threading.Lock()
_bound: set[int] = set()  # handles of libraries whose kiln_setup ran


def _idle_cpus() -> int:
    """CPUs not busy with a kernel build of this process right now: the parts a large plan may be split into."""
    return max(1, available_cpus() - toolchain.builds_in_flight())


def _build_all(sources: list[str], low_priority: bool = False) -> list[ctypes.CDLL]:
    """The libraries of `sources`, built at once, each by its own compiler process (`low_priority`: in the
    background, see toolchain.build)."""
    if len(sources) == 1:
        return [toolchain.build(sources[0], SETUP, low_priority)]
    with ThreadPoolExecutor(max_workers=len(sources), thread_name_prefix="kiln-build") as pool:
        return list(pool.map(lambda source: toolchain.build(source, SETUP, low_priority), sources))


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
    """The code of one plan for one set of input layouts: its analysis, C library and Python driver.

    The C is rendered when the variant is made. Its libraries are built then too, or, with
    `in_background`, in a worker thread (background.py) unless the cache holds them: then `run`
    is None until `finish()` loads them.
    """

    def __init__(self, plan: "NativePlan", analysis: Analysis, in_background: bool = False):
        self.analysis = analysis
        blas = numpy_blas()
        layout = object_layout()
        assert layout is not None
        parts = background.workers() if in_background else _idle_cpus()  # (each part compiles on its own)
        rendered = render_plan(analysis, layout, blas.int_type if blas else None, max_parts=parts)
        self.sources, self.segment_args, self.row_nodes = rendered.sources, rendered.segment_args, rendered.row_nodes
        self.segment_ir = rendered.segments
        self._part_of = rendered.part_of
        # (parts of a split plan are whole C files, each with its own preludes)
        self.source = "\n".join(self.sources)
        self._plan = plan
        self.held = analysis.held_by_segments()
        self.run: Any = None
        self.pending: background.Build | None = None
        if not in_background:
            self._load(_build_all(self.sources))
            return
        libs = [toolchain.cached(source, SETUP) for source in self.sources]
        if all(lib is not None for lib in libs):
            self._load(libs)
        else:
            self.pending = background.submit(lambda: _build_all(self.sources, low_priority=True))

    @property
    def ready(self) -> bool:
        """Whether `finish()` would not wait: the libraries are loaded, built, or their build failed."""
        return self.run is not None or self.pending is None or self.pending.done()

    def finish(self) -> None:
        """Load the libraries a background build made, waiting for it if need be (CompilerUnavailable if it
        failed)."""
        if self.run is None:
            assert self.pending is not None
            self._load(self.pending.result())

    def _load(self, libs: list[ctypes.CDLL]) -> None:
        for lib in libs:
            _bind(lib)
        self._libs = libs
        self.segments = []
        for k in range(len(self.segment_args)):
            fn = getattr(libs[self._part_of[k]], f"kiln_segment_{k}")
            fn.restype = ctypes.c_longlong
            fn.argtypes = [ctypes.py_object, ctypes.c_void_p]
            self.segments.append(fn)
        self._arena_views: dict[int, tuple[int, tuple, np.dtype]] = {}
        self.driver, run = self._generate(self._plan)
        views, nbytes = self._arena_views, self.analysis.arena_bytes
        if self.analysis.dims:  # (a plan for every size: its arena is sized per call)
            self._pool: Any = GrowingArenaPool(len(self.analysis.dims))
        else:
            self._pool = ArenaPool(lambda: Arena(nbytes, views))
        self._namespace["pool"] = self._pool.get
        self.run = run

    def matches(self, layouts: dict[int, Layout]) -> bool:
        """Whether arrays with these layouts (value id -> non-C layout) are what this variant reads."""
        a = self.analysis
        return all(layouts.get(key) == a.held_layouts.get(key) for key in self.held)

    # ---- the Python driver ------------------------------------------------------------------
    def _generate(self, plan: "NativePlan") -> tuple[str, Any]:
        a = self.analysis
        graph = a.graph
        ns: dict[str, Any] = {"xp": np, "empty": np.empty, "asarray": np.asarray, "miss": plan._miss,
                              "resolve": resolve, "fallback": plan._fallback}
        self._namespace = ns
        names: dict[int, str] = {v.id: f"i{k}" for k, v in enumerate(graph.inputs)}
        lines = ["def run(inputs, dims):"]
        if graph.inputs:
            lines.append("    " + ", ".join(names[v.id] for v in graph.inputs) + ", = inputs")
        if a.dims:  # a plan for every size: the call's sizes, the guards on them, the arena for them
            lines += [f"    {dim_variable(name)} = dims[{name!r}]" for name in a.dims]
            test = guard_source(needed_guards(plan.size_guards, a.dims))
            lines += [f"    if not ({test}): return fallback(inputs, dims)",
                      f"    A = pool({py_size(a.arena_bytes)})", "    D = A.dims"]
            lines += [f"    D[{k}] = {dim_variable(name)}" for k, name in enumerate(a.dims)]
        else:
            lines += ["    A = pool()", "    V = A.views"]
        body: list[str] = []
        counter = [0]

        def const(value: Any) -> str:
            counter[0] += 1
            ns[f"c{counter[0]}"] = value
            return f"c{counter[0]}"

        def params_text(params: dict) -> str:
            """A node's params as keyword arguments (symbolic ones evaluated for the call's sizes)."""
            if is_symbolic(params):
                return f", **resolve({const(params)}, dims)"
            return "".join(f", {k}={const(p)}" for k, p in params.items())

        def shape_text(shape: tuple) -> str:
            return "(" + "".join(py_size(d) + ", " for d in shape) + ")"

        def materialize(v: Value) -> str:
            """The Python name holding v's array, emitting what computes it (a view, an arena view)."""
            if v.id in names:
                return names[v.id]
            node = a.producer[v.id]
            name = f"v{v.id}"
            if a.kinds[id(node)] == "view":
                src = materialize(node.inputs[0])
                body.append(f"    {name} = {const(node.prim.kernel)}(xp, {src}{params_text(node.params)})")
            else:  # a native result in the arena (fresh ones are named where they are allocated)
                key = a.root[v.id]
                buf = a.buffers[key]
                if key != v.id and key in names:  # written in place over a fresh buffer: the same array
                    names[v.id] = names[key]
                    return names[v.id]
                assert buf.kind == "arena", (v, buf.kind)
                if a.dims:
                    body.append(f"    {name} = A.view({py_size(buf.offset)}, {shape_text(v.shape)}, "
                                f"{const(v.dtype.np)})")
                else:
                    self._arena_views[v.id] = (buf.offset, tuple(v.shape), v.dtype.np)
                    body.append(f"    {name} = V[{v.id}]")
            names[v.id] = name
            return name

        segment = 0
        written = set(a.written.values())
        for kind, nodes in a.units():
            if kind == "python":
                (node,) = nodes
                args = [materialize(v) for v in node.inputs]
                names[node.out.id] = f"v{node.out.id}"
                body.append(f"    v{node.out.id} = {const(node.prim.kernel)}({', '.join(['xp', *args])}"
                            f"{params_text(node.params)})")
                continue
            for node in nodes:
                for v in a.native_outputs.get(id(node), []):
                    if a.root[v.id] == v.id and a.buffers[v.id].kind == "fresh":
                        names[v.id] = f"v{v.id}"
                        body.append(f"    v{v.id} = empty({shape_text(v.shape)}, {const(v.dtype.np)})")
            # (a 0-d array a state write lands in is passed as it is: a NumPy scalar there fails the check,
            # where asarray would hand the segment a copy to write into)
            args = [names[key] if a.buffers[key].value.shape or key in written else f"asarray({names[key]})"
                    for key in self.segment_args[segment]]
            body += [f"    rc = seg{segment}(({''.join(a + ', ' for a in args)}), A.address)",  # (a tuple, even empty)
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


def _layout_of(x: Any, v: Value) -> Layout | None | bool:
    """None when generated code reads `x` as C-contiguous `v`, its Layout when it reads it with other
    strides, False when it cannot read it (not an ndarray of v's dtype and shape, misaligned)."""
    if x.__class__ is not np.ndarray:
        return None if not v.shape else False  # a NumPy scalar is passed through asarray
    if x.dtype is not np.dtype(v.dtype.np) or x.shape != tuple(v.shape) or not x.flags.aligned:
        return False
    if x.flags.c_contiguous:
        return None
    if any(s % x.itemsize for s in x.strides):
        return False
    return Layout(tuple(v.shape), tuple(s // x.itemsize for s in x.strides), 0)


class Observer:
    """Runs a graph node by node through NumPy (the interpreter's computation) and records the layouts
    of the arrays a native plan's segments read from Python, so a variant can be made for them."""

    def __init__(self, graph: Graph, watched: set[int]):
        self.graph = graph
        self.watched = watched
        last: dict[int, int] = {}
        for i, node in enumerate(graph.nodes):
            for v in node.inputs:
                last[v.id] = i
        kept = {v.id for v in graph.outputs} | {w.value.id for w in graph.state_writes}
        self.frees: dict[int, list[int]] = {}
        for vid, i in last.items():
            if vid not in kept:
                self.frees.setdefault(i, []).append(vid)

    def run(self, inputs: list) -> tuple[list, list, dict[int, Layout] | None]:
        """(outputs, state writes, layouts of the watched arrays that are not C-contiguous, or None when
        one of them cannot be read by generated code at all)."""
        graph = self.graph
        layouts: dict[int, Layout] | None = {}
        env: dict[int, Any] = {}

        def record(v: Value, x: Any) -> None:
            nonlocal layouts
            if layouts is None or v.id not in self.watched:
                return
            layout = _layout_of(x, v)
            if layout is False:
                layouts = None
            elif layout is not None:
                layouts[v.id] = layout

        for v, x in zip(graph.inputs, inputs):
            env[v.id] = x
            record(v, x)
        for i, node in enumerate(graph.nodes):
            out = node.prim.kernel(np, *[env[v.id] for v in node.inputs], **node.params)
            env[node.out.id] = out
            record(node.out, out)
            for vid in self.frees.get(i, ()):
                env.pop(vid, None)
        outs = []
        for v in graph.outputs:
            k = next((k for k, w in enumerate(graph.inputs) if w is v), None)
            outs.append(np.array(env[v.id], copy=True) if k is not None and graph.specs[k].kind != "arg"
                        else env[v.id])
        return outs, [env[w.value.id] for w in graph.state_writes], layouts


class NativePlan:
    """A graph lowered to native segments and NumPy steps (see the module docstring).

    `run(inputs, dims)` is the Plan interface. `graph` is the fused graph it runs, `kernel_ir`
    its fused kernels in the kernel IR, `source` the C of its segments and `driver` the Python
    that calls them (for the layouts of the
    first variant, and of later ones after it), `analysis` what went where (schedule.py),
    `segments` how many native calls a replay makes, `observed_calls` how many calls met
    layouts no variant had yet, `fallback_calls` how many calls the reference plan answered, and
    `building_calls` how many ran in Python while the code built in the background.
    """

    backend = "cpu"

    def __init__(self, graph: Graph, fused: Graph, analysis: Analysis, reference: Callable[[], Any],
                 lazy: bool = False, size_guards: list | None = None):
        self.original = graph
        # a plan for every size of its dynamic dims (symbolic_plan_for): the comparisons its lowering made on
        # the sizes, which a call's sizes must answer alike to run its code
        self.size_guards = size_guards
        self.graph = fused
        self._make_reference = reference
        self._reference: Any = None
        self._lock = threading.Lock()
        self.fallback_calls = 0
        self.observed_calls = 0
        self._stop_variants = False
        self._first_analysis = analysis
        self._seen: dict[int, Layout] | None = None
        self._observer = Observer(graph, {v.id for v in fused.inputs} | _python_results(analysis))
        self.variants: list[Variant] = []
        self.building_calls = 0  # calls run by the Observer while the first variant's code was being built
        self.lazy = lazy
        self._interpreted: Plan | None = None  # (a plan for every size: runs its calls while its code builds)
        if size_guards is not None:  # (rendered now, while the lowering's comparisons are recorded)
            self._start_variant(analysis)
        elif lazy:
            self._current = self._first_call
        elif background.background_builds():  # the trace's call needs no code: build from the first replay on
            self._current = self._start_code
        else:
            self._start_variant(analysis)

    def _first_call(self, inputs: list, dims: dict[str, int] | None) -> tuple[list, list]:
        """A lazy plan's first call, run by the Observer; the layouts it saw serve the second call."""
        self.observed_calls += 1
        outs, writes, self._seen = self._observer.run(inputs)
        self._current = self._start_code
        return outs, writes

    def _start_code(self, inputs: list, dims: dict[str, int] | None) -> tuple[list, list]:
        """The first call that needs the code (a lazy plan's second call, or a plan's first replay when it
        builds in the background): the code is generated now, for the layouts a lazy plan's first call
        saw."""
        with self._lock:
            if not self.variants and not self._stop_variants:
                layouts = self._seen or {}
                try:
                    self._start_variant(analyze(self.graph, layouts) if layouts else self._first_analysis)
                except CompilerUnavailable as exc:
                    self._give_up(exc)
        return self._current(inputs, dims)

    def _start_variant(self, analysis: Analysis) -> None:
        """Make the first variant; its code builds now, or in the background (background.py), when calls
        run by the Observer until it is ready. CompilerUnavailable when the compiler fails now."""
        variant = Variant(self, analysis, in_background=background.background_builds())
        self.variants.append(variant)
        self._observer.watched |= _python_results(analysis)
        self._current = variant.run if variant.run is not None else self._while_building

    def _while_building(self, inputs: list, dims: dict[str, int] | None) -> tuple[list, list]:
        """A call while the first variant builds in the background: the Observer runs it (eager's bits); once
        the code is ready, the variant runs this call and the next."""
        if self.variants[0].ready:
            with self._lock:
                self._finish_first()
            return self._current(inputs, dims)
        self.building_calls += 1
        if self.size_guards is not None:  # (its nodes' params may be sizes of the call)
            if self._interpreted is None:
                self._interpreted = Plan(self.original)
            return self._interpreted.run(inputs, dims)
        outs, writes, _ = self._observer.run(inputs)
        return outs, writes

    def _finish_first(self) -> None:
        """Load the first variant's libraries (waiting for their build); the plan runs in Python if it failed."""
        variant = self.variants[0]
        if variant.run is not None:
            return
        try:
            variant.finish()
        except CompilerUnavailable as exc:
            self.variants.clear()
            self._give_up(exc)
            return
        self._current = variant.run

    def _give_up(self, exc: CompilerUnavailable) -> None:
        self._stop_variants = True
        warnings.warn(f"kiln: could not generate code for a plan ({exc}); it runs in Python",
                      RuntimeWarning, stacklevel=4)
        self._current = self._fallback

    def _ensure_variant(self) -> None:
        """Make sure the first variant exists and its code is loaded, unless the compiler failed (for the
        properties that show the code)."""
        with self._lock:
            if not self.variants and not self._stop_variants:
                try:
                    self._start_variant(self._first_analysis)
                except CompilerUnavailable as exc:
                    self._give_up(exc)
            if self.variants:
                self._finish_first()

    @property
    def analysis(self) -> Analysis:
        return self.variants[0].analysis if self.variants else self._first_analysis

    @property
    def source(self) -> str:
        self._ensure_variant()
        return "\n".join(v.source for v in self.variants)

    @property
    def kernel_ir(self) -> str:
        """The kernel IR (render/kernel_ir.py) of each fused kernel the plan runs, as text, in graph order."""
        return "\n\n".join(n.prim.kernel_ir.text() for n in self.graph.nodes if hasattr(n.prim, "kernel_ir"))

    @property
    def segment_ir(self) -> str:
        """The segment IR (render/segment_ir.py) of each of the plan's segments, as text, in order (the layouts
        seen last)."""
        return "\n\n".join(segment_text(s) for s in self.current.segment_ir)

    @property
    def driver(self) -> str:
        self._ensure_variant()
        return "\n".join(v.driver for v in self.variants)

    @property
    def current(self) -> Variant:
        """The variant the next call runs first (the one for the layouts seen last). RuntimeError when the plan has
        none: its compiler failed, and it runs in Python."""
        self._ensure_variant()
        if not self.variants:
            raise RuntimeError("this plan has no generated code: its compiler failed, so it runs in Python")
        return next((v for v in self.variants if v.run is self._current), self.variants[0])

    @property
    def segments(self) -> int:
        """How many native calls a replay of the current variant makes (0 when the compiler failed)."""
        self._ensure_variant()
        return len(self.current.segments) if self.variants else 0

    def run(self, inputs: list, dims: dict[str, int] | None = None) -> tuple[list, list]:
        """Execute on input arrays; returns (output arrays, state-write arrays)."""
        if (dims is not None) != (self.size_guards is not None):
            return self._fallback(inputs, dims)
        return self._current(inputs, dims)

    def _miss(self, code: int, inputs: list, dims: dict[str, int] | None) -> tuple[list, list]:
        """A segment refused this call.

        Code 2 + k: row kernel k of the running variant met a row it cannot decide (counted in
        that kernel's `fallbacks`, as when it runs on its own): the reference plan answers. Code 1:
        an array did not have the layout the variant reads. The `Observer` then runs the call
        and records the layouts of the arrays the segments read; the variant for those layouts
        runs the next calls (made now when there is none and there is room).
        """
        if code >= 2:
            for variant in self.variants:
                if variant.run is self._current and code - 2 < len(variant.row_nodes):
                    variant.row_nodes[code - 2].prim.fallbacks += 1
            return self._fallback(inputs, dims)
        if self.size_guards is not None:  # (a plan for every size has one variant: its inputs C-contiguous)
            return self._fallback(inputs, dims)
        self.observed_calls += 1
        outs, writes, layouts = self._observer.run(inputs)
        if layouts is None:
            return outs, writes
        with self._lock:
            match = next((v for v in self.variants if v.matches(layouts)), None)
            if match is None and len(self.variants) < MAX_VARIANTS and not self._stop_variants:
                try:
                    match = Variant(self, analyze(self.graph, layouts))
                    self.variants.append(match)
                    # its own NumPy steps may hand a segment another layout (NumPy keeps a column-major
                    # operand's order): watch their results too, so a miss on one makes a variant for it
                    self._observer.watched |= _python_results(match.analysis)
                except CompilerUnavailable as exc:  # the compiler broke since lowering: keep what there is
                    self._stop_variants = True
                    warnings.warn(f"kiln: could not generate code for new input layouts ({exc}); calls with "
                                  "those layouts run in Python", RuntimeWarning, stacklevel=2)
            if match is not None:
                self._current = match.run  # (already running: something else failed, e.g. a dtype)
        return outs, writes

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


def _python_results(analysis: Analysis) -> set[int]:
    """Ids of the values an analysis computes with NumPy steps (whose layouts NumPy decides)."""
    return {n.out.id for n in analysis.graph.nodes if analysis.kinds[id(n)] == "python"}


def native_problem(graph: Graph) -> str | None:
    """Why a graph cannot get a native plan here, or None."""
    problem = layout_problem()
    if problem is not None:
        return f"generated code cannot read Python objects here: {problem}"
    return None


EAGER_PLANS = 8  # native plans made eagerly per graph structure in a process; later ones are lazy
_made: dict[tuple, int] = {}


def _structure(graph: Graph) -> tuple:
    """A graph's ops and inputs without their shapes: what plans for one function at many shapes share."""
    return len(graph.inputs), tuple(node.prim.name for node in graph.nodes)


def _expected_layouts(fused: Graph, strides: dict[int, tuple[int, ...]], python: set[int]) -> dict[int, Layout]:
    """The layouts the trace saw (Graph.observed_strides) for `fused`'s inputs and for the results of
    its nodes that NumPy computes (value ids `python`): the first variant expects them, instead of
    learning them on a first replay."""
    values = list(fused.inputs) + [node.out for node in fused.nodes if node.out.id in python]
    return {v.id: Layout(tuple(v.shape), strides[v.id], 0) for v in values if v.id in strides}


def plan_for(graph: Graph, reference: Callable[[], Any]) -> NativePlan | None:
    """A NativePlan for `graph`, or None when no node of it would run natively (or it cannot here).

    Generating code costs a compiler run (some 50 ms and up) per plan. A function called with a
    new shape on every call (without dynamic_dims) would pay it on every call, for a plan that
    runs once: so past EAGER_PLANS plans of one structure, a plan is *lazy*: its first call runs
    in Python, and its code is generated at its second call (for the layouts the first saw).
    """
    if native_problem(graph) is not None:
        return None
    fused = fuse(graph, min_elements=1, min_nodes=1)
    analysis = analyze(fused)
    expected = _expected_layouts(fused, graph.observed_strides or {}, _python_results(analysis))
    if expected:
        analysis = analyze(fused, expected)
    if not any(kind == "segment" for kind, _ in analysis.units()):
        return None
    key = _structure(graph)
    _made[key] = _made.get(key, 0) + 1
    return NativePlan(graph, fused, analysis, reference, lazy=_made[key] > EAGER_PLANS)


def symbolic_plan_for(graph: Graph, reference: Callable[[], Any]) -> NativePlan | None:
    """A NativePlan for a graph whose shapes hold symbolic sizes, made once for every size (size_guards.py), or
    None when no node of it would run natively, or its lowering would need a plain size.

    Its sizes and offsets are expressions of the dims, which its segments read from the arena and its driver
    from the call; a call whose sizes answer a comparison the lowering made otherwise than the traced sizes
    did runs the reference plan. Its inputs are read as C-contiguous (a call with others runs the reference).
    """
    if native_problem(graph) is not None:
        return None
    dims = tuple(size_names([*graph.inputs, *(node.out for node in graph.nodes)]))
    try:
        with recording_sizes() as guards:
            fused = fuse(graph, min_elements=1, min_nodes=1, row_seeds=static_row_seeds(graph))
            analysis = analyze(fused, dims=dims)
            if not any(kind == "segment" for kind, _ in analysis.units()):
                return None
            return NativePlan(graph, fused, analysis, reference, size_guards=guards)
    except (SymbolicSizeUsed, UnspellableSize) as exc:
        debug.log_lowering(f"a plan for every size stays in Python: {exc}")
        return None
