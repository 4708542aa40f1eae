"""Elementwise fusion: group chains of cheap elementwise nodes into one generated C loop.

A group has one root (its output) and absorbs producers whose every use is inside the
group and whose output has the root's shape. Its external inputs must each be either
the full output shape, or broadcast along a leading block and/or a trailing block of
dims (bias rows, per-row statistics, scalars): then one [outer, inner] loop with
compile-time index forms covers them all, and GCC vectorizes the inner loop. Where no
split fits that way (a conv bias (1, C, 1, 1) over (N, C, H, W); a pooling window's
maximum (N, C, H/2, 1, W/2, 1) over (N, C, H/2, 2, W/2, 2)), a *strided* form reads an
input broadcast along any dims through its offset computed from `o` (once per row) and
from `j` (`strided_form`), the split chosen for long inner loops with few divisions. The kernel
writes a C-ordered result, so a group stands in only for values eager NumPy also lays
out in C order (layouts.py): a later NumPy sum adds another layout in another order.

Which nodes fuse, each primitive says itself (`Primitive.fuses`, `broadcast`, `transcendental`).
Fused code equals eager execution bit for bit, with one exception: the float32
transcendentals exp, log, tanh, erf and sigmoid (`Primitive.transcendental`) fuse through the
renderer's own vectorized versions (render/vecmath.py), which stay within 4 ulp of NumPy's
(at most 3 measured on a dense grid, tests/jit/test_vector_math.py) and match it exactly on
NaN, +-inf, +-0 and the overflow and underflow edges; no libm or NumPy implementation
gives NumPy's bits anyway. In float64 they stay in NumPy, whose SIMD loops beat scalar
libm. log1p, sin, cos and pow stay in NumPy too: pow because NumPy turns a broadcast
scalar exponent 0.5 / 2 / -1 into sqrt / square / reciprocal, which C's pow() does not.
"""
from __future__ import annotations

import math
from ...ir import Graph, Node, Value
from ...symbolic import is_symbolic, lowering_for_every_size
from .layouts import eager_layouts

DTYPES = {"float32", "float64", "bool"}
MIN_ELEMENTS = 4096  # below this, NumPy's per-call cost is already small
MIN_NODES = 2


def _fusible(node: Node) -> bool:
    """Whether `node` may join an elementwise group: an op that fuses, or a broadcast (the group reads its
    input through a broadcast index form instead), on the dtypes generated code handles."""
    prim = node.prim
    if not (prim.fuses or prim.broadcast) or node.out.dtype.name not in DTYPES:
        return False
    if prim.transcendental and node.out.dtype.name != "float32":
        return False
    if any(v.dtype.name not in DTYPES for v in node.inputs):
        return False
    if node.params and is_symbolic(node.params):  # a group falls back to its nodes' NumPy kernels
        return False
    # (symbolic sizes only where the code is lowered for every size: elsewhere a group's kernel is built for the
    # sizes of its shapes)
    return all(isinstance(d, int) or lowering_for_every_size() for d in node.out.shape)


def index_form(shape: tuple, out_shape: tuple, split: int) -> str | None:
    """How an input of `shape` is read inside an [outer, inner] loop split at `split`.

    "full" (o*inner + j), "row" (j: constant along the outer dims), "col" (o: constant along
    the inner dims), "scalar" (0), or None when this split cannot express it.
    """
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    outer_full = shape[:split] == out_shape[:split]
    outer_ones = all(d == 1 for d in shape[:split])
    inner_full = shape[split:] == out_shape[split:]
    inner_ones = all(d == 1 for d in shape[split:])
    if outer_full and inner_full:
        return "full"
    if outer_ones and inner_full:
        return "row"
    if outer_full and inner_ones:
        return "col"
    if outer_ones and inner_ones:
        return "scalar"
    return None


STRIDED = "at:"  # a strided form: this prefix, then the C index expression in o, j and inner
NARROW = 2**31  # inner blocks below this index with 32-bit unsigned math, which GCC vectorizes
SHORT_INNER = 16  # a strided group's inner loop shorter than this costs more per row than it saves


def _offset(var: str, out_dims: tuple, in_dims: tuple, narrow: bool) -> tuple[str, int]:
    """The C-ordered offset, in an input block of dims `in_dims`, of flat index `var` over `out_dims`
    (each input dim equal to the output's or 1, a broadcast), and how many divisions it takes.
    Adjacent dims laid out as one are merged; broadcast dims contribute nothing."""
    dims: list[list[int]] = []  # [output size, input stride], fastest first
    stride = 1
    for size, d in zip(reversed(out_dims), reversed(in_dims)):
        step = stride if d == size and size > 1 else 0
        stride *= d
        if size == 1:
            continue
        if dims and (dims[-1][1] == step == 0 or (step and dims[-1][1] * dims[-1][0] == step)):
            dims[-1] = [dims[-1][0] * size, dims[-1][1]]
        else:
            dims.append([size, step])
    return offset_expression(var, dims, narrow)


def offset_expression(var: str, dims: list, narrow: bool = False) -> tuple[str, int]:
    """The C offset of flat index `var` over dims [(size, stride), ...] given fastest first (a zero
    stride contributes nothing), and how many divisions it takes; `narrow`: 32-bit unsigned math."""
    x, u = (f"(unsigned){var}", "u") if narrow else (var, "")
    terms, below, divisions = [], 1, 0
    for k, (size, step) in enumerate(dims):
        if not step:
            below *= size
            continue
        term = x if below == 1 else f"({x} / {below}{u})"
        if k < len(dims) - 1:
            term = f"({term} % {size}{u})"
        divisions += (below != 1) + (k < len(dims) - 1)
        terms.append(term if step == 1 else f"{term} * {step}{u}")
        below *= size
    if not terms:
        return "0", 0
    offset = " + ".join(reversed(terms))
    return (f"(long long)({offset})" if narrow else f"({offset})"), divisions


def _strided(shape: tuple, out_shape: tuple, split: int) -> tuple[str, int] | None:
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    if any(d not in (1, e) for d, e in zip(shape, out_shape)):
        return None
    inner_size = math.prod(shape[split:])
    row, _ = _offset("o", out_shape[:split], shape[:split], narrow=False)
    col, divisions = _offset("j", out_shape[split:], shape[split:], narrow=math.prod(out_shape[split:]) < NARROW)
    if shape[split:] == out_shape[split:]:
        col = "j"  # the whole inner block, read as it is
    index = row if inner_size == 1 else (col if row == "0" else f"{row} * {inner_size} + {col}")
    return STRIDED + index, divisions


def layout_form(shape: tuple, strides: tuple, out_shape: tuple, split: int) -> tuple[str, int] | None:
    """A strided index form reading an input of `shape` through its own element `strides` (any
    order, such as a permuted view; zero strides broadcast), and how many divisions the inner loop
    takes; None for negative strides. Adjacent dims laid out as one are merged."""
    pad = len(out_shape) - len(shape)
    shape, strides = (1,) * pad + tuple(shape), (0,) * pad + tuple(strides)
    if any(d not in (1, e) for d, e in zip(shape, out_shape)) or any(s < 0 for s in strides):
        return None

    def dims(lo: int, hi: int) -> list:
        found: list[list[int]] = []  # [output size, input stride], fastest first
        for size, d, s in zip(reversed(out_shape[lo:hi]), reversed(shape[lo:hi]), reversed(strides[lo:hi])):
            step = s if d == size and size > 1 else 0
            if size == 1:
                continue
            if found and found[-1][1] * found[-1][0] == step and step:
                found[-1] = [found[-1][0] * size, found[-1][1]]
            elif found and found[-1][1] == step == 0:
                found[-1] = [found[-1][0] * size, 0]
            else:
                found.append([size, step])
        return found

    row, _ = offset_expression("o", dims(0, split), narrow=False)
    col, divisions = offset_expression("j", dims(split, len(out_shape)),
                                       narrow=math.prod(out_shape[split:]) < NARROW)
    index = col if row == "0" else (row if col == "0" else f"{row} + {col}")
    return STRIDED + index, divisions


def strided_form(shape: tuple, out_shape: tuple, split: int) -> str | None:
    """A strided index form for an input of `shape` broadcast along any dims (or None).

    Each input dim matches the output's or is 1 (broadcast). The index is the input's C-ordered
    offset of the output element's coordinates: per row from `o` over the outer dims, and from `j`
    over the inner block (32-bit unsigned arithmetic there, which vectorizes), dims of size 1
    contributing nothing and adjacent dims merged where laid out as one: for (1, 6, 1, 1) over
    (64, 6, 28, 28) split at 2, "(o % 6)".
    """
    found = _strided(shape, out_shape, split)
    return None if found is None else found[0]


def choose_split(input_shapes: list[tuple], out_shape: tuple, strided: bool = False,
                 strides: list[tuple | None] | None = None) -> tuple[int, list[str]] | None:
    """The split (largest inner block first) under which every input has an index form.

    With `strided`, when no split gives every input a plain form, the split under which the others
    take strided forms (`strided_form`): an inner block of at least SHORT_INNER elements where there
    is one, then the fewest divisions per element inside the inner loop, then the largest block.
    `strides` gives, for inputs laid out in another order than C's, their element strides: those are
    read through them (`layout_form`)."""
    strides = strides or [None] * len(input_shapes)
    if all(s is None for s in strides):
        for split in range(0, len(out_shape) + 1):
            forms = [index_form(s, out_shape, split) for s in input_shapes]
            if all(f is not None for f in forms):
                return split, forms  # type: ignore[return-value]
    if strided:  # inner loops long enough to vectorize, then the fewest divisions, then the longest
        best = None
        for split in range(0, len(out_shape) + 1):
            found = [layout_form(s, st, out_shape, split) if st is not None else
                     (f, 0) if (f := index_form(s, out_shape, split)) else _strided(s, out_shape, split)
                     for s, st in zip(input_shapes, strides)]
            if all(f is not None for f in found):
                inner = math.prod(out_shape[split:])
                cost = (inner < SHORT_INNER, sum(c for _, c in found), -inner)  # type: ignore[misc]
                if best is None or cost < best[0]:
                    best = (cost, split, [f for f, _ in found])  # type: ignore[misc]
        if best is not None:
            return best[1], best[2]
    return None


class Group:
    """A fusion group: nodes in topological order, the root last, and its external inputs."""

    def __init__(self, nodes: list[Node]):
        self.nodes = nodes
        self.root = nodes[-1]
        self.broadcast_inputs: set[int] = set()  # inputs eager sees as broadcast views (expand outputs)
        self.inputs = external_inputs(nodes)


def external_inputs(nodes: list[Node]) -> list[Value]:
    """The values `nodes` read that none of them computes, each once, in order of first use."""
    inside = {n.out.id for n in nodes}
    found: dict[int, Value] = {}
    for n in nodes:
        for v in n.inputs:
            if v.id not in inside:
                found.setdefault(v.id, v)
    return list(found.values())


def find_groups(graph: Graph, min_elements: int | None = None, min_nodes: int | None = None) -> list[Group]:
    """Greedy grouping from the last node backwards; each node joins at most one group.

    `min_elements` and `min_nodes` default to MIN_ELEMENTS and MIN_NODES (read at call time). A
    native plan (runtime.py) passes 1 for both, since inside one generated function even a
    single small node costs nothing to call; a group never ends in an expand then (a broadcast
    stays a view, read through strides).
    """
    min_elements = MIN_ELEMENTS if min_elements is None else min_elements
    min_nodes = MIN_NODES if min_nodes is None else min_nodes
    users: dict[int, list[Node]] = {}
    for n in graph.nodes:
        for v in n.inputs:
            users.setdefault(v.id, []).append(n)
    external = {v.id for v in graph.outputs} | {w.value.id for w in graph.state_writes}
    producer = {n.out.id: n for n in graph.nodes}
    by_id = {id(n): n for n in graph.nodes}
    position = {id(n): k for k, n in enumerate(graph.nodes)}  # a group lists its members in graph order
    assigned: set[int] = set()
    groups = []
    layouts = None
    for root in reversed(graph.nodes):
        if id(root) in assigned or not _fusible(root) or math.prod(root.out.shape) < min_elements:
            continue
        if min_nodes < MIN_NODES and root.prim.broadcast:
            continue
        members = {id(root)}
        stack = [root]
        while stack:
            node = stack.pop()
            for v in node.inputs:
                p = producer.get(v.id)
                if p is None or id(p) in members or id(p) in assigned or not _fusible(p):
                    continue
                if p.out.shape != root.out.shape or v.id in external:
                    continue
                if not all(id(u) in members for u in users.get(v.id, [])):
                    continue
                members.add(id(p))
                stack.append(p)
        if len(members) < min_nodes:
            continue
        nodes = sorted((by_id[m] for m in members), key=lambda n: position[id(n)])
        group = Group(nodes)
        if choose_split([tuple(v.shape) for v in group.inputs], tuple(root.out.shape), strided=True) is None:
            continue
        if layouts is None:
            layouts = eager_layouts(graph)
        if layouts.get(root.out.id) != "C":
            continue  # eager lays this result out in another order: a C-ordered stand-in changes later sums
        # (an input in another order, under a C-ordered root such as a copy, is read through its strides
        # in native plans (`layout_form`); a group run on its own hands such calls to NumPy)
        group.broadcast_inputs = {k for k, v in enumerate(group.inputs) if layouts.get(v.id) == "bcast"}
        assigned |= members
        groups.append(group)
    return groups


def describe(group: Group) -> str:
    return " -> ".join(n.prim.name for n in group.nodes)

