"""Native segments: which nodes of a plan generated C runs, where every value lives, and the schedule.

`analyze(graph, specs)` takes a fused graph (row kernels and elementwise groups already
formed, see runtime.py) and decides per node:

* ``native``: a compute node generated C runs: an elementwise group, a row kernel, a
  matmul (gemm.py: NumPy's own BLAS call), a sum over leading axes, a sum or max over a
  small window of axes (windows.py: pooling), a convolution's unfold2d or fold2d (im2col.py), or ``full``;
* ``view``: a reshape, permute, expand, slice or detach whose result is its input's
  memory read with static strides (views.py), and ``unpack``: one output of a native row
  kernel. These cost nothing and do not end a segment;
* ``python``: everything else, run by its primitive's NumPy kernel between segments.

A node is native only where its layouts make generated code exact: elementwise inputs
read as full, row, column or scalar index forms (a broadcast view counts as its source),
row-kernel inputs compact, matmul operands in a layout NumPy hands straight to BLAS with
batch dims in C order (NumPy lays its result out after its operands otherwise).

Then it orders the nodes so that native nodes run in as few unbroken runs as it can
(`_schedule`: a topological order that keeps to the kind it is in while nodes of that
kind are ready, with the nodes that only feed state writes last), and assigns every
buffer a home: graph inputs and NumPy results are arrays Python holds (checked
C-contiguous on each call); a buffer that leaves the plan (an output, a state write, or
what a NumPy step may return a view of) is allocated fresh on every call; every other
native result lives in the arena (arena.py) at an offset fixed by liveness.

State writes in place (`_write_in_place`): an elementwise group whose result is a state
write (an optimizer's new parameter or momentum, a BatchNorm running stat) writes it
straight into the input array it replaces, so the executor copies nothing afterwards.
Only where nothing can go wrong after the write: the group runs in the plan's last
segment, after that segment's argument checks and after every row kernel, gather and
scatter_add in it (the calls that may hand a call back to Python), with no NumPy step
after it; no node after
it reads the old value; neither the old nor the new value is a plan output (a residual
or a returned tensor would change under its holder). A call that a segment hands back
before the write has written nothing, so its replay starts from the same state.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from ...ir import Graph, Node, StateWrite, Value
from ...symbolic import is_symbolic
from ....ops.creation import Full
from ....ops.linalg import Matmul
from . import elementwise_groups, gemm, rows
from .arena import Interval, assign_offsets, assign_symbolic_offsets, round_up
from .codegen import FusedElementwise
from .rowcode import RowKernel, Unpack
from .size_guards import SymbolicSizeUsed
from .views import Layout, view_layout
from .im2col import fold_problem, unfold_problem
from .windows import is_window

NATIVE_DTYPES = {"float32", "float64", "bool"}
FLOATS = {"float32", "float64"}
NEUTRAL = {"view", "unpack"}


@dataclass
class Buffer:
    """Memory one value owns. kind: "input" (graph input `index`), "literal" (a constant baked into
    the C source), "python" (a NumPy step's result), "fresh" (allocated per call) or "arena"."""

    value: Value
    kind: str
    index: int = -1  # graph input position, for "input" and "literal"
    offset: int = -1  # byte offset in the arena, for "arena"


@dataclass
class Analysis:
    """What `analyze` found: see the module docstring."""

    graph: Graph
    kinds: dict[int, str] = field(default_factory=dict)  # id(node) -> native / view / unpack / python
    notes: dict[int, str] = field(default_factory=dict)  # id(node) -> why a compute node stays in Python
    layout: dict[int, Layout] = field(default_factory=dict)  # value id -> static layout in its buffer
    root: dict[int, int] = field(default_factory=dict)  # value id -> id of the value owning its buffer
    aliases: dict[int, frozenset] = field(default_factory=dict)  # value id -> buffers it may share memory with
    buffers: dict[int, Buffer] = field(default_factory=dict)  # owning value id -> buffer
    producer: dict[int, Node] = field(default_factory=dict)  # value id -> node
    order: list[Node] = field(default_factory=list)
    forms: dict[int, tuple] = field(default_factory=dict)  # id(elementwise node) -> (split, forms, shapes)
    arena_bytes: int = 0
    scratch_offset: int = 0  # where row kernels' scratch rows start in the arena
    native_outputs: dict[int, list[Value]] = field(default_factory=dict)  # id(native node) -> values it writes
    in_place: dict[int, int] = field(default_factory=dict)  # id(elementwise node) -> the input it overwrites
    held_layouts: dict[int, Layout] = field(default_factory=dict)  # value id -> layout, for arrays Python holds
    # (graph inputs, NumPy results) that are not C-contiguous
    written: dict[int, int] = field(default_factory=dict)  # state-write value id -> the graph input (value id)
    # whose array a native node writes it into (see the module docstring)
    dims: tuple[str, ...] = ()  # the symbolic sizes' names, in the order the arena's first bytes hold them (a plan
    # for every size: its offsets and sizes are SymInts, see size_guards.py)

    def held_by_segments(self) -> list[int]:
        """Owning value ids of the arrays Python holds that some segment reads (graph inputs and NumPy
        results): their layouts are checked on each call."""
        used: list[int] = []
        for kind, nodes in self.units():
            if kind != "segment":
                continue
            for node in nodes:
                values = node.prim.group.inputs if isinstance(node.prim, RowKernel) else node.inputs
                for v in values:
                    key = self.root[v.id]
                    if self.buffers[key].kind in ("input", "python") and key not in used:
                        used.append(key)
        return used

    def units(self) -> list[tuple[str, list[Node]]]:
        """The schedule as ("segment", nodes) and ("python", [node]) units; view nodes join the unit
        they sit in (they have no code)."""
        out: list[tuple[str, list[Node]]] = []
        for node in self.order:
            kind = self.kinds[id(node)]
            if kind == "python":
                out.append(("python", [node]))
            elif kind == "native":
                if out and out[-1][0] == "segment":
                    out[-1][1].append(node)
                else:
                    out.append(("segment", [node]))
        return out


def _static(v: Value) -> bool:
    return not is_symbolic(tuple(v.shape))


def _effective_shape(layout: Layout) -> tuple | None:
    if layout.compact():
        return layout.shape
    return layout.broadcast_source()


def analyze(graph: Graph, held_layouts: dict[int, Layout] | None = None, dims: tuple[str, ...] = ()) -> Analysis:
    """Classify, schedule and place a fused graph's nodes (see the module docstring).

    `held_layouts` gives the strides, by value id, of graph inputs and NumPy results that are
    not C-contiguous (a residual that is a transposed weight, an unfold's sliding-window view);
    everything else Python holds is taken to be C-contiguous. Segments check both on every call.
    `dims` names the symbolic sizes of a graph lowered for every size (inside
    size_guards.recording_sizes); without them a node with a symbolic shape stays in Python.
    """
    a = Analysis(graph, dims=tuple(dims))
    a.held_layouts = dict(held_layouts or {})
    for i, v in enumerate(graph.inputs):
        kind = "literal" if graph.specs[i].kind == "literal" else "input"
        a.buffers[v.id] = Buffer(v, kind, index=i)
        a.layout[v.id] = a.held_layouts.get(v.id) or Layout.contiguous(tuple(v.shape))
        a.root[v.id] = v.id
        a.aliases[v.id] = frozenset([v.id])
    for node in graph.nodes:
        a.producer[node.out.id] = node
        _classify(a, node)
    candidates = _write_candidates(a)
    a.order = _schedule(a, _tail(a) if candidates else set())
    _place(a, candidates)
    return a


def _own(a: Analysis, v: Value, kind: str) -> None:
    a.buffers[v.id] = Buffer(v, kind)
    a.layout[v.id] = Layout.contiguous(tuple(v.shape))
    a.root[v.id] = v.id


def _python(a: Analysis, node: Node, why: str) -> None:
    a.kinds[id(node)] = "python"
    if why:
        a.notes[id(node)] = why
    _own(a, node.out, "python")
    if node.out.id in a.held_layouts:
        a.layout[node.out.id] = a.held_layouts[node.out.id]
    # a NumPy kernel may return (a view of) one of its operands: assume it can
    a.aliases[node.out.id] = frozenset().union(*[a.aliases[v.id] for v in node.inputs], [node.out.id])


def _classify(a: Analysis, node: Node) -> None:
    if not a.dims and not all(_static(v) for v in (*node.inputs, node.out)):
        return _python(a, node, "symbolic shape")
    if node.prim.view_strides is not None:  # a view kiln follows: its value is its input's memory, restrided
        x = node.inputs[0]
        try:
            layout = view_layout(node, a.layout[x.id]) if x.id in a.layout else None
        except SymbolicSizeUsed:  # (lowered for every size: this view's strides need a plain size)
            layout = None
        if layout is None or layout.shape != tuple(node.out.shape):
            return _python(a, node, "")
        a.kinds[id(node)] = "view"
        a.layout[node.out.id] = layout
        a.root[node.out.id] = a.root[x.id]
        a.aliases[node.out.id] = a.aliases[x.id]
        return None
    if isinstance(node.prim, Unpack):
        packer = a.producer[node.inputs[0].id]
        if a.kinds.get(id(packer)) != "native":
            return _python(a, node, "")
        a.kinds[id(node)] = "unpack"
        _own(a, node.out, "arena")
        a.aliases[node.out.id] = frozenset([node.out.id])
        return None
    why = _symbolic_problem(node) if a.dims else None
    try:
        why = why or _native_problem(a, node)
    except SymbolicSizeUsed as exc:  # (lowered for every size: deciding needs a plain size)
        why = f"symbolic shape: {exc}"
    if why is not None:
        return _python(a, node, why)
    a.kinds[id(node)] = "native"
    if isinstance(node.prim, RowKernel):
        outs = list(node.prim.group.outputs)
        a.native_outputs[id(node)] = outs
        if len(outs) == 1:
            _own(a, node.out, "arena")
            a.aliases[node.out.id] = frozenset([node.out.id])
        # with several outputs, each unpack node owns one (their packed tuple has no memory)
        return None
    a.native_outputs[id(node)] = [node.out]
    _own(a, node.out, "arena")
    a.aliases[node.out.id] = frozenset([node.out.id])
    return None


def _native_problem(a: Analysis, node: Node) -> str | None:
    """Why generated code cannot run `node` exactly, or None when it can."""
    if node.prim.indexed:
        return _indexed_problem(a, node)
    values = (*node.inputs, node.out) if not isinstance(node.prim, RowKernel) else \
        (*node.prim.group.inputs, *node.prim.group.outputs)
    if any(v.dtype.name not in NATIVE_DTYPES for v in values):
        return "dtype"
    if any(v.id not in a.layout for v in node.inputs):
        return "input without a static layout"
    if isinstance(node.prim, FusedElementwise):
        shapes = [_effective_shape(a.layout[v.id]) for v in node.inputs]
        # an input in another order (a permuted view, a slice) of memory the plan owns is read
        # through its own strides; one Python holds must be contiguous or a broadcast (its layout
        # is checked per call against the variant's, see runtime.py)
        if any(s is None and a.buffers[a.root[v.id]].kind in ("input", "python") for s, v in zip(shapes, node.inputs)):
            return "an input Python holds is neither contiguous nor a broadcast of a contiguous array"
        strides = [None if s is not None else tuple(a.layout[v.id].strides) for s, v in zip(shapes, node.inputs)]
        shapes = [s if s is not None else tuple(a.layout[v.id].shape) for s, v in zip(shapes, node.inputs)]
        chosen = elementwise_groups.choose_split([tuple(s) for s in shapes], tuple(node.out.shape), strided=True,
                                     strides=strides)
        if chosen is None:
            return "no index form fits the inputs (or an input has negative strides)"
        a.forms[id(node)] = chosen
        return None
    if isinstance(node.prim, RowKernel):
        for v in node.inputs:
            lay = a.layout[v.id]
            if not lay.compact() and lay.size != 1:
                return "a row-kernel input is not contiguous"
        return None
    name = node.prim.name
    if name == "matmul":
        return _matmul_problem(a, node)
    if name == "unfold2d":
        return unfold_problem(node)
    if name == "fold2d":
        return fold_problem(node, a.layout[node.inputs[0].id].compact())
    if is_window(node):
        return None if a.layout[node.inputs[0].id].compact() else "window reduction of a non-contiguous array"
    if name == "sum":
        return _colsum_problem(a, node)
    if name == "full":
        return None if node.out.dtype.name in NATIVE_DTYPES else "dtype"
    if name in CONVOLUTIONS:
        return "a convolution: its primitive calls kiln's contraction library (kiln/ops/conv_native.py) between segments"
    return "no generated code for this op"


CONVOLUTIONS = ("conv2d", "conv2d_input_grad", "conv2d_weight_grad")  # native already, in their own library


SIZE_GENERIC = (FusedElementwise, RowKernel, Matmul, Full)  # kernels whose code takes the call's sizes


def _symbolic_problem(node: Node) -> str | None:
    """Why a node that generated code could run stays in Python in a plan for every size (None when it runs
    there too): its params are sizes of the call, or its shapes are and its code is written for its sizes."""
    params = {k: v for k, v in node.params.items() if not (isinstance(node.prim, Full) and k == "shape")}
    if is_symbolic(params):  # (a fill of 1/B: its code would hold the traced value; a fill's shape is its out's)
        return "symbolic params: its code would hold their traced values"
    if not isinstance(node.prim, SIZE_GENERIC) and not all(_static(v) for v in (*node.inputs, node.out)):
        return "symbolic shape: no size-generic code for this op yet"
    return None


def indexed_sizes(node: Node) -> tuple[int, int, int]:
    """(rows, indices per row, length of the indexed axis) of a native gather or scatter_add."""
    idx = node.inputs[1]
    data = node.inputs[0]
    return math.prod(idx.shape[:-1]), int(idx.shape[-1]), int(data.shape[-1])


def _indexed_problem(a: Analysis, node: Node) -> str | None:
    """A gather (x, idx) or scatter_add (base, idx, src) along the last axis, with an index array of
    x's leading dims, all compact: generated code reads exactly the elements NumPy's fancy indexing
    does (negative indices wrap; one out of range hands the call back to NumPy, which raises)."""
    data, idx = node.inputs[0], node.inputs[1]
    rank = len(data.shape)
    if data.dtype.name not in FLOATS or idx.dtype.name != "int64" or node.out.dtype.name != data.dtype.name:
        return "dtype"
    if rank == 0 or len(idx.shape) != rank or int(node.params.get("axis", -1)) % rank != rank - 1:
        return "not along the last axis"
    if tuple(idx.shape[:-1]) != tuple(data.shape[:-1]):
        return "index leading dims differ from the data's"
    if node.prim.indexed == "scatter_add":
        src = node.inputs[2]
        if src.dtype.name != data.dtype.name or tuple(src.shape) != tuple(idx.shape):
            return "source dtype or shape"
    if any(not a.layout[v.id].compact() for v in node.inputs):
        return "an operand is not contiguous"
    return None


def _matmul_problem(a: Analysis, node: Node) -> str | None:
    x, y = node.inputs
    if x.dtype.name not in FLOATS or len(x.shape) < 2 or len(y.shape) < 2:
        return "matmul dtype or rank"
    lx, ly = a.layout[x.id], a.layout[y.id]
    if not gemm.matmul_fits(lx.strides, lx.shape, ly.strides, ly.shape):
        return "NumPy copies an operand before BLAS"
    for lay in (lx, ly):
        batch = [s for d, s in zip(lay.shape[:-2], lay.strides[:-2]) if d != 1 and s != 0]
        if any(s1 < s2 for s1, s2 in zip(batch, batch[1:])):
            return "batch dims not in C order (NumPy lays the result out differently)"
    return None


def colsum_rows(node: Node) -> tuple[int, int] | None:
    """(reduced rows, kept columns) of a sum over a leading block of axes, else None. A whole vector
    is one column: NumPy adds its contiguous run pairwise, as it adds a single column."""
    x = node.inputs[0]
    axes = tuple(node.params.get("axes", ()))
    if len(x.shape) == 1 and axes == (0,):
        return x.shape[0], 1
    if not axes or axes != tuple(range(len(axes))) or len(axes) >= len(x.shape):
        return None
    return math.prod(x.shape[:len(axes)]), math.prod(x.shape[len(axes):])


def channel_sum(node: Node) -> tuple[int, int, int] | None:
    """(leading rows, channels, trailing run) of a sum over every axis but one middle one (a conv
    bias's gradient: (N, C, H, W) over (0, 2, 3)), else None. NumPy adds each channel's runs in
    order, starting from 0, each run pairwise: ((0 + p(x[0, c])) + p(x[1, c])) + ..."""
    x = node.inputs[0]
    axes = tuple(node.params.get("axes", ()))
    kept = [d for d in range(len(x.shape)) if d not in axes]
    if len(kept) != 1 or kept[0] in (0, len(x.shape) - 1):
        return None
    k = kept[0]
    lead, channels, run = math.prod(x.shape[:k]), int(x.shape[k]), math.prod(x.shape[k + 1:])
    if channels < 2 or run < 2 or lead < 1:  # (one channel: NumPy adds the whole array as one run)
        return None
    return lead, channels, run


def _colsum_problem(a: Analysis, node: Node) -> str | None:
    x = node.inputs[0]
    if x.dtype.name not in FLOATS or node.out.dtype.name != x.dtype.name:
        return "sum dtype"
    if colsum_rows(node) is None and channel_sum(node) is None:
        return "not a sum over leading axes or over all axes but one"
    if not a.layout[x.id].compact():
        return "sum of a non-contiguous array"
    return None


# ---- the schedule -------------------------------------------------------------------------
def _mode(kind: str) -> str:
    return "python" if kind == "python" else "native"


def _tail(a: Analysis) -> set[int]:
    """Native nodes whose results reach only state writes (an optimizer's update): scheduled last, so
    that they can write in place (`_write_in_place`)."""
    outputs = {v.id for v in a.graph.outputs}
    users: dict[int, list[Node]] = {}
    for n in a.graph.nodes:
        for v in _reads(n):
            users.setdefault(v.id, []).append(n)
    tail: set[int] = set()
    for n in reversed(a.graph.nodes):
        if a.kinds[id(n)] not in ("native", "view") or n.out.id in outputs:
            continue
        if isinstance(n.prim, RowKernel):
            continue
        if all(id(u) in tail for u in users.get(n.out.id, [])):
            tail.add(id(n))
    return {id(n) for n in a.graph.nodes if id(n) in tail and a.kinds[id(n)] == "native"}


LATE_BYTES = 1 << 20
"""A node that reads only graph inputs and makes at least this many bytes runs no earlier than the
node before it in the graph: hoisted into an early segment, its result would stay live (in the
arena) from there to its use. A backward graph's recomputed convolution columns (rematerialize.py)
are such nodes."""


def _large(n: Node) -> bool:
    return not is_symbolic(tuple(n.out.shape)) and math.prod(n.out.shape) * n.out.dtype.np.itemsize >= LATE_BYTES


def _schedule(a: Analysis, tail: set[int] | frozenset = frozenset()) -> list[Node]:
    """A topological order with few switches between native and Python nodes, the `tail` nodes last
    (see the module docstring)."""
    nodes = a.graph.nodes
    pos = {id(n): i for i, n in enumerate(nodes)}
    made_by = {n.out.id: n for n in nodes}
    waits: dict[int, int] = {}
    feeds: dict[int, list[Node]] = {}
    for k, n in enumerate(nodes):
        deps = {id(made_by[v.id]) for v in n.inputs if v.id in made_by}
        if not deps and k and _large(n):  # made from inputs alone: not before its place (see LATE_BYTES)
            deps = {id(nodes[k - 1])}
        waits[id(n)] = len(deps)
        for d in deps:
            feeds.setdefault(d, []).append(n)
    ready: dict[str, list] = {"neutral": [], "python": [], "native": [], "tail": []}

    def push(n: Node) -> None:
        kind = a.kinds[id(n)]
        queue = "tail" if id(n) in tail else "neutral" if kind in NEUTRAL else _mode(kind)
        heapq.heappush(ready[queue], (pos[id(n)], id(n), n))

    for n in nodes:
        if waits[id(n)] == 0:
            push(n)
    order: list[Node] = []
    mode = "python"  # NumPy steps that need nothing native run first, so segments can merge
    while len(order) < len(nodes):
        if ready["neutral"]:
            queue = ready["neutral"]
        elif ready[mode]:
            queue = ready[mode]
        elif ready["native" if mode == "python" else "python"]:
            mode = "native" if mode == "python" else "python"
            queue = ready[mode]
        else:
            mode, queue = "native", ready["tail"]
        _, _, n = heapq.heappop(queue)
        order.append(n)
        for user in feeds.get(id(n), []):
            waits[id(user)] -= 1
            if waits[id(user)] == 0:
                push(user)
    return order


# ---- memory ---------------------------------------------------------------------------------
def _escaping(a: Analysis) -> set[int]:
    """Buffers a plan output or state write may share memory with."""
    out: set[int] = set()
    for v in [*a.graph.outputs, *(w.value for w in a.graph.state_writes)]:
        out |= a.aliases[v.id]
    return out


def _last_uses(a: Analysis) -> dict[int, int]:
    """Buffer -> the last schedule step that reads it (through any value that may share its memory)."""
    last: dict[int, int] = {}
    for i, n in enumerate(a.order):
        for v in _reads(n):
            for key in a.aliases.get(v.id, ()):
                last[key] = max(last.get(key, -1), i)
    return last


def _reads(node: Node) -> list[Value]:
    return list(node.prim.group.inputs) if isinstance(node.prim, RowKernel) else list(node.inputs)


def _in_place(a: Analysis) -> None:
    """Let an elementwise group write over a full-size operand it reads last (a GEMM's output under its
    bias and activation, say): one buffer and one pass over memory fewer, the same arithmetic.

    The operand must be a native result of the group's shape and dtype, read directly (not through a
    view), by nothing after this node, and not itself an output. The group's result then owns that
    buffer (and makes it fresh when the result leaves the plan).
    """
    escaping = _escaping(a)
    last = _last_uses(a)
    for i, n in enumerate(a.order):
        if a.kinds[id(n)] != "native" or id(n) not in a.forms or id(n) in a.in_place or a.root[n.out.id] != n.out.id:
            continue
        _split, forms = a.forms[id(n)]
        for k, v in enumerate(n.inputs):
            key = a.root.get(v.id)
            if forms[k] != "full" or key != v.id or a.buffers[key].kind != "arena" or key in escaping:
                continue
            if v.dtype.name != n.out.dtype.name or tuple(v.shape) != tuple(n.out.shape) or last.get(key) != i:
                continue
            out = n.out.id
            del a.buffers[out]
            for vid, r in a.root.items():  # the result and every view of it now live in the operand's buffer
                if r == out:
                    a.root[vid] = key
            for vid, shared in a.aliases.items():
                if out in shared:
                    a.aliases[vid] = (shared - {out}) | {key}
            last[key] = max(i, last.get(out, i))
            a.in_place[id(n)] = k
            break


def _write_input(graph: Graph, write: StateWrite) -> int | None:
    """The position of the graph input whose array a state write replaces (None if it has none)."""
    for i, spec in enumerate(graph.specs):
        if write.kind == "arg":
            if spec.kind == "arg" and spec.ref == write.ref:
                return i
        elif write.kind == "tensor":
            if spec.kind in ("param", "buffer", "captured") and spec.ref is write.ref:
                return i
        elif spec.kind == write.kind and spec.ref is write.ref:
            return i
    return None


def _write_candidates(a: Analysis) -> dict[int, int]:
    """State-write value id -> graph input value id, for the writes an elementwise group could make
    in place as far as values, layouts and outputs go (`_write_in_place` checks the schedule)."""
    graph = a.graph
    outputs: set[int] = set()
    for v in graph.outputs:
        outputs |= a.aliases[v.id]
    found: dict[int, int] = {}
    for w in graph.state_writes:
        v = w.value
        node = a.producer.get(v.id)
        i = _write_input(graph, w)
        if node is None or i is None or a.kinds.get(id(node)) != "native" or id(node) not in a.forms:
            continue
        target = graph.inputs[i]
        if a.buffers[target.id].kind != "input" or target.id in a.held_layouts:
            continue
        if v.dtype.name != target.dtype.name or tuple(v.shape) != tuple(target.shape) or a.root[v.id] != v.id:
            continue
        if target.id in outputs or v.id in outputs:
            continue
        others = [u for u in graph.state_writes if u is not w]
        if any(target.id in a.aliases[u.value.id] or v.id in a.aliases[u.value.id] for u in others):
            continue
        found[v.id] = target.id
    return found


def _write_in_place(a: Analysis, candidates: dict[int, int]) -> None:
    """Let elementwise groups write state writes into the arrays they replace (see the module docstring)."""
    units = a.units()
    last = max((k for k, (kind, _) in enumerate(units) if kind == "segment"), default=None)
    if last is None or any(kind == "python" for kind, _ in units[last + 1:]):
        return
    step = {id(n): i for i, n in enumerate(a.order)}
    segment = units[last][1]
    after = max((step[id(n)] for n in segment if isinstance(n.prim, RowKernel) or n.prim.indexed),
                default=-1)  # (the nodes that may hand the call back)
    start = step[id(segment[0])]
    for n in a.order[start:]:
        out = n.out.id
        key = candidates.get(out)
        if key is None or a.kinds[id(n)] != "native" or step[id(n)] <= after:
            continue
        reads = [k for k, v in enumerate(n.inputs) if key in a.aliases[v.id]]
        if any(n.inputs[k].id != key for k in reads):
            continue  # the group reads the old value through a view
        later = a.order[step[id(n)] + 1:]
        if any(a.kinds[id(m)] not in NEUTRAL and any(key in a.aliases[v.id] for v in _reads(m)) for m in later):
            continue  # a later node reads the old value
        del a.buffers[out]
        for vid, r in a.root.items():
            if r == out:
                a.root[vid] = key
        for vid, shared in a.aliases.items():
            if out in shared:
                a.aliases[vid] = (shared - {out}) | {key}
        a.written[out] = key
        if reads:
            a.in_place[id(n)] = reads[0]


def _place(a: Analysis, candidates: dict[int, int] | None = None) -> None:
    """Fresh or arena for every native buffer; arena offsets by liveness (see the module docstring)."""
    if candidates:
        _write_in_place(a, candidates)
    _in_place(a)
    escaping = _escaping(a)
    last = _last_uses(a)
    step = {id(n): i for i, n in enumerate(a.order)}
    intervals = []
    scratch = 0
    for n in a.order:
        if a.kinds[id(n)] != "native":
            continue
        if isinstance(n.prim, RowKernel):
            scratch = max(scratch, n.prim.group.space.inner * 8)
        for v in a.native_outputs[id(n)]:
            if a.root[v.id] != v.id:
                continue  # written in place over an operand's buffer
            buf = a.buffers[v.id]
            if v.id in escaping:
                buf.kind = "fresh"
                continue
            nbytes = math.prod(v.shape) * v.dtype.np.itemsize
            intervals.append(Interval(v.id, nbytes, step[id(n)], max(last.get(v.id, step[id(n)]), step[id(n)])))
    if a.dims:  # (a plan for every size: its call's sizes lie in the arena's first bytes)
        offsets, total = assign_symbolic_offsets(intervals, round_up(8 * len(a.dims)))
    else:
        offsets, total = assign_offsets(intervals)
    for key, offset in offsets.items():
        a.buffers[key].offset = offset
    a.scratch_offset = total
    a.arena_bytes = total + scratch


def literal_array(graph: Graph, index: int) -> np.ndarray:
    """The constant of a literal graph input, C-contiguous, in its graph dtype."""
    v = graph.inputs[index]
    return np.ascontiguousarray(np.asarray(graph.specs[index].literal, dtype=v.dtype.np).reshape(tuple(v.shape)))


def needs_sequential(node: Node) -> bool:
    """Whether a native column sum must add its rows as the Sum kernel's window path does (no leading 0 +)."""
    return rows.sequential(node)
