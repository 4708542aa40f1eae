"""Lower the scheduler's groups to the kernel IR (render/kernel_ir.py).

* An elementwise group (elementwise_groups.py) becomes ``for o parallel: for j vector:`` loading each input
  by its index form, one Compute per node, and one store of the root.
* A row group (rows.py) becomes ``for o parallel:`` over rows, holding, in the group's order,
  the per-row reads, one Reduce per reduction (its prologue: the full nodes it needs, recomputed
  inside its reduce axis), one Compute per row node, per-row stores as soon as a value is known,
  and a last ``for j vector:`` loop writing the full-size outputs (the epilogue).
* A fill (``full``), a sum over leading axes and a per-channel sum of runs become small kernels of
  their own (`lower_fill`, `lower_leading_sum`, `lower_channel_sum`), called from a plan's segments;
  so do a gather and a scatter-add along the last axis (`lower_indexed`), whose indices are checked,
  and a window reduction (pooling: `lower_window`).

Names are positional: ``in{k}``/``out{k}`` buffers, ``x{k}`` an input read inside a loop over
``j``, ``r{k}`` an input read once per row, ``t{i}`` the value of the group's i-th node.
"""
from __future__ import annotations

import math

from ... import debug
from ....ops.primitive import REGISTRY
from ...ir import Node, Value
from ..render.cstyle import index_expr
from ....sizes import is_symbolic_number
from ..render.kernel_ir import INDEX_DTYPE, CheckIndex, Compute, Kernel, Load, Loop, Param, Reduce, Statement, Store
from .elementwise_groups import Group
from .elementwise_groups import describe as describe_elementwise
from .rows import RowGroup
from .rows import describe as describe_rows
from .windows import window_geometry

FULL = "o * inner + j"  # the index of the element (o, j) of a full-size value


def _size(v: Value) -> int:
    """Elements of `v` (a SymInt in a plan lowered for every size, see size_guards.py)."""
    n = math.prod(v.shape)
    return n if is_symbolic_number(n) else int(n)


def lower_elementwise(group: Group, forms: list[str], in_place: int | None = None) -> Kernel:
    """The kernel computing one elementwise group, each input read by its index form in `forms`.

    With `in_place` = k, input k and the output may be the same memory (each element is read before it
    is written, at the same index). A full-size input k is then read through ``out`` itself, so every
    buffer stays unaliased (the C compiler vectorizes only loops over unaliased pointers); other forms
    mark both buffers as possibly aliased.
    """
    through_out = in_place is not None and forms[in_place] == "full"
    root = group.root.out
    params = [Param("out", root.dtype.name, _size(root), written=True,
                    restrict=in_place is None or through_out)]
    names: dict[int, str] = {}
    body: list[Statement] = []
    for k, (v, form) in enumerate(zip(group.inputs, forms)):
        params.append(Param(f"in{k}", v.dtype.name, _size(v), restrict=k != in_place or through_out))
        names[v.id] = f"x{k}"
        source = "out" if through_out and k == in_place else f"in{k}"
        body.append(Load(f"x{k}", v.dtype.name, source, index_expr(form)))
    for t, node in enumerate(group.nodes):
        names[node.out.id] = f"t{t}"
        body.append(Compute(f"t{t}", node.out.dtype.name, node.prim, tuple(names[v.id] for v in node.inputs),
                            copy=node.prim.broadcast))  # a broadcast: read through its index form
    body.append(Store("out", FULL, names[root.id]))
    notes = (f"input {in_place} may be the output's own memory",) if in_place is not None else ()
    return _checked(Kernel(f"fused[{describe_elementwise(group)}]", "elementwise", tuple(params),
                           (Loop("o", "outer", "parallel", (Loop("j", "inner", "vector", tuple(body)),)),),
                           compute_bound=any(n.prim.transcendental for n in group.nodes), notes=notes))


def lower_fill(out: Value) -> Kernel:
    """The kernel writing one value into every element of `out`. The value is the kernel's one-element
    input ``in0`` (the plan keeps it as a constant of the traced value's bits)."""
    dtype = out.dtype.name
    params = (Param("out", dtype, _size(out), written=True), Param("in0", dtype, 1))
    body = (Load("x0", dtype, "in0", "0"), Store("out", FULL, "x0"))
    return _checked(Kernel(f"fill[{dtype}]", "elementwise", params,
                           (Loop("o", "outer", "parallel", (Loop("j", "inner", "vector", body),)),)))


def lower_leading_sum(rows: int, cols: int, dtype: str, from_zero: bool) -> Kernel:
    """The sum over the leading `rows` of a C-ordered (rows, cols) array, in NumPy's order: each column
    starts as its first row (``0 + row0`` when `from_zero`, else ``row0``; 0 without rows), then adds the
    next rows one after another. ``in1`` holds the zero. The kernel is called with outer = 1 and inner =
    cols: the rows loop is serial, and a team may share the columns."""
    params = (Param("out", dtype, cols, written=True), Param("in0", dtype, rows * cols), Param("in1", dtype, 1))
    if rows == 0:
        first: tuple[Statement, ...] = (Load("z", dtype, "in1", "0"), Store("out", "j", "z"))
    elif from_zero:
        first = (Load("z", dtype, "in1", "0"), Load("x0", dtype, "in0", "j"),
                 Compute("t0", dtype, REGISTRY["add"], ("z", "x0")), Store("out", "j", "t0"))
    else:
        first = (Load("x0", dtype, "in0", "j"), Store("out", "j", "x0"))
    add_row = (Load("a", dtype, "out", "j"), Load("x", dtype, "in0", "(r + 1) * inner + j"),
               Compute("t", dtype, REGISTRY["add"], ("a", "x")), Store("out", "j", "t"))
    body: tuple[Statement, ...] = (Loop("j", "inner", "vector", first),)
    if rows > 1:
        body += (Loop("r", str(rows - 1), "serial", (Loop("j", "inner", "vector", add_row),)),)
    return _checked(Kernel(f"sum over {rows} leading rows[{dtype}]", "elementwise", params,
                           (Loop("o", "outer", "parallel", body),)))


def lower_channel_sum(lead: int, channels: int, run: int, dtype: str) -> Kernel:
    """The sum of a C-ordered (lead, channels, run) array over its first and last axes, in NumPy's order
    (schedule.channel_sum): each channel starts at 0 and adds, for n = 0, 1, ..., the pairwise sum of its
    run at n. Called with outer = channels and inner = run (a row kernel: a team shares the channels);
    ``in1`` holds the zero."""
    params = (Param("out", dtype, channels, written=True), Param("in0", dtype, lead * channels * run),
              Param("in1", dtype, 1))
    add_run = (Reduce("s", dtype, "sum", "pairwise", "j", "inner",
                      (Load("x", dtype, "in0", "(n * outer + o) * inner + j"),), "x"),
               Load("a", dtype, "out", "o"), Compute("t", dtype, REGISTRY["add"], ("a", "s")), Store("out", "o", "t"))
    body = (Load("z", dtype, "in1", "0"), Store("out", "o", "z"), Loop("n", str(lead), "serial", add_run))
    return _checked(Kernel(f"sum over {lead} x {run} of {channels} channels[{dtype}]", "rows", params,
                           (Loop("o", "outer", "parallel", body),)))


def lower_indexed(kind: str, rows: int, k: int, n: int, dtype: str) -> Kernel:
    """A gather or scatter-add (`kind`, Primitive.indexed) along the last axis of a C-ordered (rows, n) ``in0``,
    at the (rows, k) int64 indices ``in1``: ``out[o, c] = in0[o, in1[o, c]]`` (gather, out is (rows, k)), or a
    copy of ``in0`` to which ``in2[o, c]`` is added at ``in1[o, c]`` for c = 0, 1, ... in turn (scatter-add, as
    ``np.add.at`` adds index by index). A negative index counts from the end; one out of range makes the
    kernel return 1 (NumPy then raises for the call). Called with outer = rows and inner = k: a team may
    share the rows, each of which reads and writes only its own."""
    at = f"o * {n} + w"  # the picked element of row o
    pick: tuple[Statement, ...] = (Load("i", INDEX_DTYPE, "in1", "o * inner + c"), CheckIndex("w", "i", n))
    if kind == "gather":
        params = (Param("out", dtype, rows * k, written=True), Param("in0", dtype, rows * n),
                  Param("in1", INDEX_DTYPE, rows * k))
        row: tuple[Statement, ...] = (Loop("c", "inner", "serial",
                                           (*pick, Load("x", dtype, "in0", at), Store("out", "o * inner + c", "x"))),)
    elif kind == "scatter_add":
        params = (Param("out", dtype, rows * n, written=True), Param("in0", dtype, rows * n),
                  Param("in1", INDEX_DTYPE, rows * k), Param("in2", dtype, rows * k))
        add = (Load("a", dtype, "out", at), Load("s", dtype, "in2", "o * inner + c"),
               Compute("t", dtype, REGISTRY["add"], ("a", "s")), Store("out", at, "t"))
        copy = (Load("x", dtype, "in0", f"o * {n} + j"), Store("out", f"o * {n} + j", "x"))
        row = (Loop("j", str(n), "serial", copy), Loop("c", "inner", "serial", (*pick, *add)))
    else:
        raise ValueError(f"lower_indexed: kind {kind!r} is not 'gather' or 'scatter_add'")
    return _checked(Kernel(f"{kind} along the last axis of {n}[{dtype}]", "indexed", params,
                           (Loop("o", "outer", "parallel", row),)))


def lower_window(node: Node) -> Kernel:
    """The kernel of a window reduction (windows.py): each output element folds its window's elements in the
    eager kernel's order, ``combine(combine(x0, x1), x2)...``. Called with the geometry's outer and inner."""
    g = window_geometry(node)
    dtype = node.out.dtype.name
    combine = REGISTRY[node.prim.reduction.combine]
    start = [] if g.row == "0" else [g.row]
    body: list[Statement] = []
    for k, offset in enumerate(g.offsets):
        terms = [*start, "j" if g.step == 1 else f"j * {g.step}", *([str(offset)] if offset else [])]
        body.append(Load(f"x{k}", dtype, "in0", " + ".join(terms)))
        if k:
            body.append(Compute(f"t{k}", dtype, combine, (f"t{k - 1}" if k > 1 else "x0", f"x{k}")))
    body.append(Store("out", FULL, f"t{len(g.offsets) - 1}" if len(g.offsets) > 1 else "x0"))
    params = (Param("out", dtype, g.outer * g.inner, written=True), Param("in0", dtype, _size(node.inputs[0])))
    return _checked(Kernel(f"{combine.name} over windows of {len(g.offsets)}[{dtype}]", "elementwise", params,
                           (Loop("o", "outer", "parallel", (Loop("j", "inner", "vector", tuple(body)),)),)))


def _checked(kernel: Kernel) -> Kernel:
    """`kernel`, verified first where graphs are (KILN_DEBUG, and the test suite: debug.set_verify)."""
    if debug.verify_enabled():
        kernel.verify()
    return kernel


class _RowLowering:
    """Builds the Kernel of one row group (see the module docstring)."""

    def __init__(self, group: RowGroup):
        self.group = group
        self.index = {n.out.id: k for k, n in enumerate(group.nodes)}  # member value -> position
        self.member = {n.out.id: n for n in group.nodes}
        self.inputs = {v.id: k for k, v in enumerate(group.inputs)}
        self.outputs = {v.id: k for k, v in enumerate(group.outputs)}

    def _level(self, v: Value) -> str | None:
        node = self.member.get(v.id)
        return self.group.levels[id(node)] if node is not None else None

    def _operand(self, v: Value, context: str) -> str:
        """The local holding `v` inside a loop over j ("full") or at row scope ("row")."""
        if v.id in self.member:
            return f"t{self.index[v.id]}"
        return f"{'r' if context == 'row' else 'x'}{self.inputs[v.id]}"

    def _compute(self, node: Node, context: str) -> Compute:
        return Compute(f"t{self.index[node.out.id]}", node.out.dtype.name, node.prim,
                       tuple(self._operand(v, context) for v in node.inputs), copy=node.prim.identity)

    def _cone(self, targets: list[Value]) -> list[Statement]:
        """The loads and full members computing `targets` for one element j, in order."""
        need: set[int] = set()
        reads: set[int] = set()
        stack = list(targets)
        while stack:
            v = stack.pop()
            if v.id in self.member:
                node = self.member[v.id]
                if self.group.levels[id(node)] != "full" or id(node) in need:
                    continue
                need.add(id(node))
                stack.extend(node.inputs)
            else:
                reads.add(self.inputs[v.id])
        body: list[Statement] = []
        for k in sorted(reads):
            v = self.group.inputs[k]
            body.append(Load(f"x{k}", v.dtype.name, f"in{k}", index_expr(self.group.space.form(v.shape))))
        body += [self._compute(n, "full") for n in self.group.nodes if id(n) in need]
        return body

    def _reduce(self, node: Node) -> Reduce:
        (x,) = node.inputs
        group = self.group
        if group.sequential[id(node)]:  # the NumPy kernel's small-window path: left to right
            order = "sequential"
        else:
            order = node.prim.reduction.order  # "pairwise" (a sum) or "any" (a maximum)
        return Reduce(f"t{self.index[node.out.id]}", node.out.dtype.name, node.prim.name, order, "j", "inner",
                      tuple(self._cone([x])), self._operand(x, "full"))

    def kernel(self) -> Kernel:
        group = self.group
        params = [Param(f"out{k}", v.dtype.name, _size(v), written=True) for k, v in enumerate(group.outputs)]
        params += [Param(f"in{k}", v.dtype.name, _size(v)) for k, v in enumerate(group.inputs)]
        row: list[Statement] = []
        row_reads = sorted({self.inputs[v.id] for n in group.nodes if group.levels[id(n)] == "row"
                            for v in n.inputs if v.id in self.inputs})
        for k in row_reads:
            v = group.inputs[k]
            row.append(Load(f"r{k}", v.dtype.name, f"in{k}", "0" if _size(v) == 1 else "o"))
        for node in group.nodes:
            level = group.levels[id(node)]
            if level == "reduce":
                row.append(self._reduce(node))
            elif level == "row":
                row.append(self._compute(node, "row"))
            else:
                continue
            if node.out.id in self.outputs:
                row.append(Store(f"out{self.outputs[node.out.id]}", "o", f"t{self.index[node.out.id]}"))
        full_outputs = [v for v in group.outputs if self._level(v) == "full"]
        if full_outputs:
            stores = [Store(f"out{self.outputs[v.id]}", FULL, f"t{self.index[v.id]}") for v in full_outputs]
            row.append(Loop("j", "inner", "vector", tuple(self._cone(full_outputs) + stores)))
        return Kernel(f"fused_rows[{describe_rows(group)}]", "rows", tuple(params),
                      (Loop("o", "outer", "parallel", tuple(row)),))


def lower_rows(group: RowGroup) -> Kernel:
    """The kernel computing one row group: a loop over rows holding its reductions, row nodes and epilogue."""
    return _checked(_RowLowering(group).kernel())
