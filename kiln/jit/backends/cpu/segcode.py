"""The C source of a native plan: one function per segment, running its kernels and GEMMs in order.

A segment function ``long long kiln_segment_K(const void *args, char *arena)`` takes the
tuple of arrays Python holds for it (graph inputs, NumPy results, fresh outputs; see
cpython_layout.py) and the calling thread's arena. This module describes each segment in the
segment IR (render/segment_ir.py), which render/c_segments.py spells: it first checks each array
(exact ndarray, dtype, rank, dims, C-contiguous and aligned) and returns 1 at the first that does
not fit, then runs its nodes in schedule order:

* an elementwise group: its loop (codegen.py) as a static function, called with
  pointers into the buffers (a view is its buffer plus an offset, read with its strides);
* a row kernel (rowcode.py): likewise; a nonzero return (a row whose maximum is a zero
  of both signs) makes the segment return 2 + the kernel's number in the plan;
* a matmul: NumPy's BLAS call (gemm.py plans it, render/c_gemm.py spells it), one per batch index;
* a sum over leading axes: NumPy's order, every kept column gets ``0 + row0 + row1 + ...``
  (or, where the Sum kernel chains a small window, ``row0 + row1 + ...``): a kernel of the
  kernel IR (lower.lower_leading_sum);
* a sum of runs added pairwise, in order from 0 (lower.lower_channel_sum): over the first and
  last axes of each channel (a conv bias's gradient), or a single column over many rows, which
  NumPy sums as the contiguous run it is;
* a window reduction (pooling, lower.lower_window), and a gather or scatter-add along the last
  axis (lower.lower_indexed), whose index out of range makes the segment return 1;
* a convolution's unfold2d and fold2d (im2col.py, render/c_im2col.py);
* ``full``: a fill kernel from the kernel IR (lower.lower_fill), reading its value from a constant.

Constants (literal graph inputs, fill values) are written into the source by their bits,
so NaN payloads and -0.0 survive. ``kiln_setup`` binds NumPy's BLAS and the type objects
the argument checks compare with; the runtime calls it once per loaded library.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...ir import Node, Value
from ...symbolic import SymInt
from ....sizes import is_symbolic_number
from . import background, blas_team
from .codegen import render_function
from .lower import lower_channel_sum, lower_fill, lower_indexed, lower_leading_sum, lower_window
from .parallel import team_min_for
from .blas import FUNCTIONS, blas_threads
from .gemm import matrix_product
from .cpython_layout import DESCR_DTYPES, ObjectLayout
from .elementwise_groups import STRIDED
from .im2col import fold_statement, unfold_statement
from .windows import is_window, window_geometry
from ..render.c_kernels import render_c
from ..render.c_plan import constant, plan_source
from ..render.c_segments import render_segment
from ..render.kernel_ir import Kernel
from ..render.segment_ir import BlockLoop, BlockPointer, Call, CheckArg, Comment, Constant, Pointer, Segment
from .rowcode import RowKernel, render_rows_function
from ..render.size_text import c_size
from .schedule import Analysis, channel_sum, colsum_rows, indexed_sizes, literal_array, needs_sequential


class _Segment:
    """One segment as the segment IR (render/segment_ir.py): argument checks, then each node's statements."""

    def __init__(self, a: Analysis, index: int, nodes: list[Node], functions: dict[int, str],
                 row_codes: dict[int, int], fill_values: dict[int, str]):
        self.a = a
        self.row_codes = row_codes  # id(row kernel node) -> the code the segment returns when it cannot decide
        self.index = index
        self.nodes = nodes
        self.functions = functions  # id(node) -> name of its static function
        self.fill_values = fill_values  # id(full node) -> the constant holding its value
        self.args: list[int] = []  # owning value ids of the arrays in the argument tuple, in order
        for node in nodes:
            for v in self._touched(node):
                key = a.root[v.id]
                if a.buffers[key].kind in ("input", "python", "fresh") and key not in self.args:
                    self.args.append(key)

    def _touched(self, node: Node) -> list[Value]:
        if isinstance(node.prim, RowKernel):
            return [*node.prim.group.inputs, *node.prim.group.outputs]
        return [*node.inputs, node.out]

    def pointer(self, v: Value) -> Pointer:
        """The first element of `v`: its buffer plus its view's offset."""
        a = self.a
        key = a.root[v.id]
        buf = a.buffers[key]
        if buf.kind == "arena":
            base, index = "arena", buf.offset
        elif buf.kind == "literal":
            base, index = "literal", buf.index
        else:
            base, index = "arg", self.args.index(key)
        return Pointer(v.dtype.name, base, index, a.layout[v.id].offset)

    def segment(self) -> Segment:
        """The segment's IR: its argument checks, then its native nodes in order."""
        a = self.a
        statements: list = []
        written = set(a.written.values())
        for j, key in enumerate(self.args):
            v = a.buffers[key].value
            custom = a.held_layouts.get(key)
            strides = None if custom is None else tuple(int(s) * v.dtype.np.itemsize for s in custom.strides)
            dtype = v.dtype.name
            statements.append(CheckArg(j, dtype, DESCR_DTYPES.index(dtype), tuple(v.shape), strides,
                                       writable=key in written))
        native = [node for node in self.nodes if a.kinds[id(node)] == "native"]
        for run in self._runs(native):
            if len(run) == 1:
                statements.append(Comment(_describe(run[0])))
                statements += self._node(run[0])
                continue
            n = _flat_size(run[0])
            statements.append(Comment(f"{len(run)} elementwise groups over {n} elements, run block by block"))
            body: list = []
            for node in run:
                body += [Comment(_describe(node)), self._block_call(node)]
            statements.append(BlockLoop(n, BLOCK, tuple(body)))
        if a.dims:  # (a plan for every size: its sizes are SymInts, spelled as C expressions of the call's sizes)
            statements = [_spelled(s) for s in statements]
        return Segment(self.index, tuple(statements), a.dims)

    # ---- elementwise groups run block by block ----------------------------------------------
    def _runs(self, nodes: list[Node]) -> list[list[Node]]:
        """The nodes in order, consecutive elementwise groups over one large flat space put together
        where running them block by block gives the same result (see `_joins`): each block's
        operands are then still in cache for the next group (an optimizer's update of one
        parameter: momentum, then the parameter reading it)."""
        runs: list[list[Node]] = []
        for node in nodes:
            if runs and self._joins(runs[-1], node):
                runs[-1].append(node)
            else:
                runs.append([node])
        return runs

    def _joins(self, run: list[Node], node: Node) -> bool:
        """Whether `node` may run block by block with `run`: both one flat loop (no outer dims) over the
        same number of elements, at least two blocks; every buffer the run and the node write is read
        by them only directly at the element being computed (not broadcast, not through an offset
        view), so block b of a later group reads what the earlier groups computed for block b and
        nothing a later block will write."""
        a = self.a
        first = run[0]
        if not all(_flat(a, n) for n in (first, node)) or _flat_size(first) != _flat_size(node):
            return False
        if is_symbolic_number(_flat_size(node)) or _flat_size(node) < 2 * BLOCK:  # (a size of the call: no guess)
            return False
        group = [*run, node]
        written = {a.root[n.out.id] for n in group}
        for n in group:
            _split, forms = a.forms[id(n)]
            for v, form in zip(n.inputs, forms):
                if not written & a.aliases[v.id]:
                    continue
                layout = a.layout[v.id]
                if form not in ("full", "row") or layout.offset != 0 or not layout.compact():
                    return False
        return True

    def _block_call(self, node: Node) -> Call:
        """The group's loop over block [kiln_b, kiln_b + kiln_n) of its flat space."""
        _split, forms = self.a.forms[id(node)]
        ptrs: list = [BlockPointer(self.pointer(node.out))]
        for v, form in zip(node.inputs, forms):
            ptrs.append(BlockPointer(self.pointer(v)) if form in ("full", "row") else self.pointer(v))
        return Call(self.functions[id(node)], 1, "kiln_n", tuple(ptrs))

    def _node(self, node: Node) -> list:
        a = self.a
        prim = node.prim
        fn = self.functions.get(id(node), "")  # (a kernel's function; matmul and im2col/col2im have none)
        if isinstance(prim, RowKernel):
            space = prim.group.space
            ptrs = tuple(self.pointer(v) for v in (*prim.group.outputs, *prim.group.inputs))
            code = self.row_codes[id(node)]
            return [Call(fn, space.outer, space.inner, ptrs, scratch=a.scratch_offset, on_fail=code)]
        if id(node) in a.forms:  # an elementwise group
            split, _forms = a.forms[id(node)]
            shape = tuple(node.out.shape)
            outer, inner = math.prod(shape[:split]), math.prod(shape[split:])
            return [Call(fn, outer, inner, (self.pointer(node.out), *[self.pointer(v) for v in node.inputs]))]
        name = prim.name
        if name == "matmul":
            x, y = node.inputs
            lx, ly = a.layout[x.id], a.layout[y.id]
            return [matrix_product(x.dtype.name, self.pointer(node.out), self.pointer(x), self.pointer(y),
                                   tuple(node.out.shape), lx.shape, lx.strides, ly.shape, ly.strides)]
        if name == "unfold2d":
            x = node.inputs[0]
            return [unfold_statement(node, self.pointer(x), a.layout[x.id].strides, self.pointer(node.out))]
        if name == "fold2d":
            return [fold_statement(node, self.pointer(node.inputs[0]), self.pointer(node.out))]
        if is_window(node):
            g = window_geometry(node)
            return [Call(fn, g.outer, g.inner, (self.pointer(node.out), self.pointer(node.inputs[0])))]
        if prim.reduction is not None:  # (not a window: a native sum over leading axes or channels)
            return [self._colsum(node)]
        if prim.indexed:  # a gather or scatter_add along the last axis (a loss picking its targets' logits): an
            # index out of range returns 1, and NumPy then raises for the call
            rows, k, _n = indexed_sizes(node)
            return [Call(fn, rows, k, tuple(self.pointer(v) for v in (node.out, *node.inputs)), on_fail=1)]
        if name == "full":
            n = math.prod(node.out.shape)
            return [Call(fn, 1, n, (self.pointer(node.out), Constant(self.fill_values[id(node)])))]
        raise AssertionError(f"no code for native node {name}")

    def _colsum(self, node: Node) -> Call:
        fn = self.functions[id(node)]
        operands = (self.pointer(node.out), self.pointer(node.inputs[0]), Constant(_zero(node.out.dtype.name)))
        runs = _channel_runs(node)
        if runs is not None:  # a row kernel over the channels, reading each run where it lies
            _lead, channels, run = runs
            return Call(fn, channels, run, operands, scratch="null", discard=True)
        _rows, cols = colsum_rows(node)  # type: ignore[misc]
        return Call(fn, 1, cols, operands)


def _spelled(x: Any) -> Any:
    """A segment IR statement (or a part of one) with every size spelled by size_text.c_size: a plain int
    stays one, a symbolic size becomes a C expression of the call's sizes."""
    if isinstance(x, SymInt):
        return c_size(x)
    if isinstance(x, tuple):
        items = tuple(_spelled(i) for i in x)
        return x if all(a is b for a, b in zip(items, x)) else items
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        changed = {f.name: new for f in dataclasses.fields(x) if (new := _spelled(old := getattr(x, f.name))) is not old}
        return dataclasses.replace(x, **changed) if changed else x
    return x


def _sum_kernel(node: Node) -> Kernel | None:
    """The kernel of a native sum that is not a window (_Segment._colsum): over the leading axes, or over the
    first and last axes of each channel."""
    reduction = node.prim.reduction
    if reduction is None or reduction.combine != "add" or is_window(node):
        return None
    dtype = node.out.dtype.name
    runs = _channel_runs(node)
    if runs is not None:
        return lower_channel_sum(*runs, dtype)
    rows, cols = colsum_rows(node)  # type: ignore[misc]
    return lower_leading_sum(rows, cols, dtype, from_zero=not needs_sequential(node))


def _channel_runs(node: Node) -> tuple[int, int, int] | None:
    """(lead, channels, run) of a sum that adds runs pairwise: each channel's runs (schedule.channel_sum), or a
    single column over several rows, which NumPy adds pairwise as the contiguous run it is (one channel with
    one run: ``0 + (0 + pairwise(run))`` has the bits of NumPy's ``0 + pairwise(run)``)."""
    if colsum_rows(node) is None:
        return channel_sum(node)  # type: ignore[return-value]
    rows, cols = colsum_rows(node)  # type: ignore[misc]
    if cols == 1 and rows > 1 and not needs_sequential(node):
        return 1, 1, rows
    return None


def _zero(dtype: str) -> str:
    """The name of the plan's constant zero of `dtype` (the start of a sum over leading rows)."""
    return f"kiln_zero_{dtype}"


BLOCK = 4096  # elements per block when elementwise groups run block by block (16 KiB of float32 per array)


def _flat(a: Analysis, node: Node) -> bool:
    """An elementwise group whose loop has no outer dims (one run over all its elements) and whose
    inputs are each read at the element's own index or a constant one, so that a block of it can run
    from pointers moved to the block's start (a strided form indexes from the loop's own start)."""
    if id(node) not in a.forms or isinstance(node.prim, RowKernel):
        return False
    split, forms = a.forms[id(node)]
    return math.prod(tuple(node.out.shape)[:split]) == 1 and not any(f.startswith(STRIDED) for f in forms)


def _flat_size(node: Node) -> int:
    return math.prod(tuple(node.out.shape))


def _describe(node: Node) -> str:
    outs = f"{node.out.type_str()}" if hasattr(node.out, "type_str") else ""
    return f"{outs} = {node.prim.name}".replace("*/", "* /")


BLAS_THREADED_WORK = 1 << 19
"""Multiply-adds (m*n*k, batch included) from which a GEMM may run on several OpenBLAS threads. Measured
with NumPy's OpenBLAS (scipy-openblas 0.3.2x): its worker thread stayed idle up to 64x64x128 (2^19) and
ran from 64x64x256 on."""


def blas_may_thread(node: Node) -> bool:
    """Whether a native matmul is large enough for OpenBLAS to run it on several threads."""
    a, b = node.inputs
    work = math.prod(a.shape) * b.shape[-1]
    if is_symbolic_number(work):  # (a plan for every size: it may, at some size; a guess, not a guard)
        return True
    return int(work) >= BLAS_THREADED_WORK


_UNNAMED = "kiln_kernel_being_named"  # a kernel's name while its C is compared with the kernels' rendered before


PART_CHARS = 120_000
"""Characters of kernel and segment C (the shared preludes not counted) per library from which a plan is split
into several, each built by its own compiler process at once (`render_plan`'s `max_parts`): a whole training
step's single plan of some 300 KB took 3.3 s in one gcc process while the other CPU idled (Zen 3 AVX2, an LSTM
language model)."""


@dataclass
class RenderedPlan:
    """What `render_plan` made of a plan."""

    sources: list[str]  # the C of each library
    segment_args: list[list[int]]  # per segment: the owning value ids of its argument tuple, in order
    row_nodes: list[Node]  # the native row kernels: segment code 2 + k is row kernel k's undecided row
    part_of: list[int]  # per segment: the source it is in
    segments: list[Segment]  # per segment: its segment IR


def render_plan(a: Analysis, layout: ObjectLayout, blas_int: str | None, max_parts: int = 1) -> RenderedPlan:
    """The C of the plan, with what the runtime needs to call it: a segment returns 2 + k when row kernel k meets
    a row it cannot decide, 1 when an argument does not fit.

    A plan of more than PART_CHARS of C is split into up to `max_parts` sources (libraries) of consecutive
    segments, each with the kernels its segments call: so several compilers build it at once. Every segment
    keeps its name (``kiln_segment_K``) and its code, whichever library holds it."""
    units = [nodes for kind, nodes in a.units() if kind == "segment"]
    functions: dict[int, str] = {}
    fill_values: dict[int, str] = {}
    rows_fns: dict[str, str] = {}  # name -> C, in order of first use
    elem_fns: dict[str, str] = {}
    consts: dict[str, str] = {}
    # a kernel's C, its name left out -> the name it has: nodes whose kernels read alike (a network's repeated
    # blocks; sizes are arguments) share one function, which the C compiler then builds once
    rendered: dict[str, str] = {}

    def once(text: str, name: str, into: dict[str, str]) -> str:
        first = rendered.setdefault(text, name)
        if first == name:
            into[name] = text.replace(_UNNAMED, name)
        return first
    uses: list[set[str]] = [set() for _ in units]  # per segment: the kernels and constants its code names
    blas_segments: set[int] = set()
    threaded_blas = False
    for s, nodes in enumerate(units):
        for k, node in enumerate(nodes):
            if a.kinds[id(node)] != "native":
                continue
            tag = f"{s}_{k}"
            if isinstance(node.prim, RowKernel):
                functions[id(node)] = once(render_rows_function(node.prim.group, _UNNAMED), f"kiln_rows_{tag}",
                                           rows_fns)
                uses[s].add(functions[id(node)])
            elif id(node) in a.forms:
                text = render_function(node.prim.group, list(a.forms[id(node)][1]), _UNNAMED, "static",
                                       a.in_place.get(id(node)))
                functions[id(node)] = once(text, f"kiln_loop_{tag}", elem_fns)
                uses[s].add(functions[id(node)])
            elif node.prim.name == "full":
                text = render_c(lower_fill(node.out), _UNNAMED, "static", team_min=team_min_for([node]))
                functions[id(node)] = once(text, f"kiln_fill_loop_{tag}", elem_fns)
                value = np.full((), node.params["value"], dtype=node.out.dtype.np)
                fill_values[id(node)] = f"kiln_fill{tag}"
                consts[f"kiln_fill{tag}"] = constant(f"kiln_fill{tag}", value)
                uses[s].update((functions[id(node)], f"kiln_fill{tag}"))
            elif is_window(node):
                text = render_c(lower_window(node), _UNNAMED, "static", team_min=team_min_for([node]))
                functions[id(node)] = once(text, f"kiln_window_{tag}", elem_fns)
                uses[s].add(functions[id(node)])
            elif (kernel := _sum_kernel(node)) is not None:
                dtype = node.out.dtype.name
                text = render_c(kernel, _UNNAMED, "static", team_min=team_min_for([node]))
                functions[id(node)] = once(text, f"kiln_sum_{tag}", elem_fns)
                consts[_zero(dtype)] = constant(_zero(dtype), np.zeros((), node.out.dtype.np))
                uses[s].update((functions[id(node)], _zero(dtype)))
            elif node.prim.indexed:
                kernel = lower_indexed(node.prim.indexed, *indexed_sizes(node), node.out.dtype.name)
                text = render_c(kernel, _UNNAMED, "static", team_min=team_min_for([node]))
                functions[id(node)] = once(text, f"kiln_{node.prim.indexed}_{tag}", elem_fns)
                uses[s].add(functions[id(node)])
            elif node.prim.name == "matmul":
                blas_segments.add(s)
                threaded_blas = threaded_blas or blas_may_thread(node)
    for i, buf in sorted((b.index, b) for b in a.buffers.values() if b.kind == "literal"):
        readers = [s for s, nodes in enumerate(units) if any(a.root.get(v.id) == buf.value.id
                                                              for n in nodes for v in _inputs(n))]
        if readers:
            consts[f"kiln_lit{i}"] = constant(f"kiln_lit{i}", literal_array(a.graph, i))
            for s in readers:
                uses[s].add(f"kiln_lit{i}")
    row_nodes = [n for nodes in units for n in nodes if isinstance(n.prim, RowKernel) and a.kinds[id(n)] == "native"]
    row_codes = {id(n): 2 + k for k, n in enumerate(row_nodes)}
    segments = [_Segment(a, s, nodes, functions, row_codes, fill_values) for s, nodes in enumerate(units)]
    if blas_segments and blas_int is None:
        raise AssertionError("a native matmul without NumPy's BLAS")
    # After a GEMM, a multi-threaded OpenBLAS on its own threads keeps them spinning on the other cores for a
    # while; a kernel team started then shares those cores with them and runs slower than one thread
    # (measured: the transformer blocks, GPT and LeNet-5 steps 4-12% faster with serial kernels). So such a
    # plan's kernels run serially, unless OpenBLAS runs its threads on kiln's team (blas_team.py, where
    # nothing spins). A plan whose GEMMs are all too small for OpenBLAS to share (a classifier head) keeps
    # its teams.
    # (while code builds in the background, share() answers what it expects to decide rather than wait)
    spinning_blas = threaded_blas and blas_threads() > 1 and not blas_team.share(
        wait=not background.background_builds())
    irs = [seg.segment() for seg in segments]
    codes = [render_segment(ir) for ir in irs]
    texts = {**rows_fns, **elem_fns, **consts}
    part_of = _split(codes, uses, texts, max_parts)
    sources = []
    count = max(part_of, default=0) + 1
    for p in range(count):
        members = [s for s, q in enumerate(part_of) if q == p]
        named = set().union(*(uses[s] for s in members))
        sources.append(plan_source(p, count, members, codes, named, rows_fns, elem_fns, consts,
                                   bool(blas_segments & set(members)), blas_int, FUNCTIONS, spinning_blas,
                                   layout.defines(), len(DESCR_DTYPES)))
    return RenderedPlan(sources, [seg.args for seg in segments], row_nodes, part_of, irs)


def _split(codes: list[str], uses: list[set[str]], texts: dict[str, str], max_parts: int) -> list[int]:
    """The part (source) of each segment: consecutive segments, the parts about equally long."""
    def cost(s: int, seen: set[str]) -> int:
        return len(codes[s]) + sum(len(texts[n]) for n in uses[s] - seen)

    seen: set[str] = set()
    total = 0
    for s in range(len(codes)):
        total += cost(s, seen)
        seen |= uses[s]
    parts = max(1, min(max_parts, len(codes), -(-total // PART_CHARS)))
    part_of, part, filled, seen = [], 0, 0, set()
    for s in range(len(codes)):
        size = cost(s, seen)
        if filled and filled + size / 2 > total * (part + 1) / parts and part < parts - 1:
            part, seen = part + 1, set()
            size = cost(s, seen)
        part_of.append(part)
        filled += size
        seen |= uses[s]
    return part_of


def _inputs(node: Node) -> list[Value]:
    if isinstance(node.prim, RowKernel):
        return list(node.prim.group.inputs)
    return list(node.inputs)
