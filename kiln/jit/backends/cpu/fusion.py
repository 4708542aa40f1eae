"""Elementwise fusion: group chains of cheap elementwise nodes into one generated C loop.

A group has one root (its output) and absorbs producers whose every use is inside the
group and whose output has the root's shape. Its external inputs must each be either
the full output shape, or broadcast along a leading block and/or a trailing block of
dims (bias rows, per-row statistics, scalars): then one [outer, inner] loop with
compile-time index forms covers them all, and GCC vectorizes the inner loop. Where no
split fits that way (a conv bias (1, C, 1, 1) over (N, C, H, W); a pooling window's
maximum (N, C, H/2, 1, W/2, 1) over (N, C, H/2, 2, W/2, 2)), a *strided* form reads an
input broadcast along outer dims anywhere through an index computed once per row from
`o` (`strided_form`), as long as its inner block is full or all ones. The kernel
writes a C-ordered result, so a group stands in only for values eager NumPy also lays
out in C order (layouts.py): a later NumPy sum adds another layout in another order.

Fused code equals eager execution bit for bit, with one exception: the float32
transcendentals exp, log, tanh, erf and sigmoid (TRANSCENDENTAL) fuse through the
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
from .layouts import eager_layouts

TRANSCENDENTAL = {"exp", "log", "tanh", "erf", "sigmoid"}  # fused in float32 only, within an ulp bound
FUSIBLE = {"neg", "abs", "sign", "relu", "sqrt", "add", "sub", "mul", "div", "maximum", "minimum",
           "lt", "le", "gt", "ge", "eq", "ne", "logical_and", "logical_or", "logical_not", "where", "cast",
           "expand", *TRANSCENDENTAL}  # expand: the group reads its input with a broadcast index form instead
DTYPES = {"float32", "float64", "bool"}
MIN_ELEMENTS = 4096  # below this, NumPy's per-call cost is already small
MIN_NODES = 2


def _fusible(node: Node) -> bool:
    if node.prim.name not in FUSIBLE or node.out.dtype.name not in DTYPES:
        return False
    if node.prim.name in TRANSCENDENTAL and node.out.dtype.name != "float32":
        return False
    if any(v.dtype.name not in DTYPES for v in node.inputs):
        return False
    return all(isinstance(d, int) and not hasattr(d, "expr") for d in node.out.shape)


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


def strided_form(shape: tuple, out_shape: tuple, split: int) -> str | None:
    """A strided index form for an input of `shape` broadcast along any outer dims (or None).

    The input's inner block (dims from `split`) must equal the output's or be all ones; its outer
    dims each match the output's or are 1 (broadcast). The index is the input's C-ordered offset of
    the output's outer coordinates, dims of size 1 contributing nothing, adjacent dims merged where
    they are laid out as one: for (1, 6, 1, 1) over (64, 6, 28, 28) split at 2, "o % 6".
    """
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    if any(d not in (1, e) for d, e in zip(shape, out_shape)):
        return None
    inner_full = shape[split:] == out_shape[split:]
    if not inner_full and any(d != 1 for d in shape[split:]):
        return None
    # (size of the output dim, stride of the input along it) for the outer dims, merged
    dims: list[list[int]] = []
    stride = 1
    for d in reversed(range(split)):
        size, step = out_shape[d], (stride if shape[d] == out_shape[d] and out_shape[d] > 1 else 0)
        stride *= shape[d]
        if size == 1:
            continue
        if dims and (dims[-1][1] == step == 0 or (step and dims[-1][1] * dims[-1][0] == step)):
            dims[-1] = [dims[-1][0] * size, dims[-1][1]]  # merge into the faster dim
        else:
            dims.append([size, step])
    terms, below = [], 1
    for k, (size, step) in enumerate(dims):  # fastest first
        if step:
            term = "o" if below == 1 else f"(o / {below})"
            if k < len(dims) - 1:
                term = f"({term} % {size})"
            terms.append(term if step == 1 else f"{term} * {step}")
        below *= size
    offset = " + ".join(reversed(terms)) or "0"
    return STRIDED + (f"({offset}) * inner + j" if inner_full else f"({offset})")


def choose_split(input_shapes: list[tuple], out_shape: tuple,
                 strided: bool = False) -> tuple[int, list[str]] | None:
    """The split (largest inner block first) under which every input has an index form.

    With `strided`, when no split gives every input a plain form, the largest inner block under
    which the others take strided forms (`strided_form`)."""
    for split in range(0, len(out_shape) + 1):
        forms = [index_form(s, out_shape, split) for s in input_shapes]
        if all(f is not None for f in forms):
            return split, forms  # type: ignore[return-value]
    if strided:
        for split in range(0, len(out_shape) + 1):
            forms = [index_form(s, out_shape, split) or strided_form(s, out_shape, split) for s in input_shapes]
            if all(f is not None for f in forms):
                return split, forms  # type: ignore[return-value]
    return None


class Group:
    """A fusion group: nodes in topological order, the root last, and its external inputs."""

    def __init__(self, nodes: list[Node]):
        self.nodes = nodes
        self.root = nodes[-1]
        inside = {n.out.id for n in nodes}
        self.broadcast_inputs: set[int] = set()  # inputs eager sees as broadcast views (expand outputs)
        self.inputs: list[Value] = []
        seen: set[int] = set()
        for n in nodes:
            for v in n.inputs:
                if v.id not in inside and v.id not in seen:
                    seen.add(v.id)
                    self.inputs.append(v)


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
    assigned: set[int] = set()
    groups = []
    layouts = None
    for root in reversed(graph.nodes):
        if id(root) in assigned or not _fusible(root) or math.prod(root.out.shape) < min_elements:
            continue
        if min_nodes < MIN_NODES and root.prim.name == "expand":
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
        nodes = [n for n in graph.nodes if id(n) in members]
        group = Group(nodes)
        if choose_split([tuple(v.shape) for v in group.inputs], tuple(root.out.shape), strided=True) is None:
            continue
        if layouts is None:
            layouts = eager_layouts(graph)
        if layouts.get(root.out.id) != "C" or any(layouts.get(v.id, "C") == "other" for v in group.inputs):
            continue  # eager lays this result out in another order: a C-ordered stand-in changes later sums
        group.broadcast_inputs = {k for k, v in enumerate(group.inputs) if layouts.get(v.id) == "bcast"}
        assigned |= members
        groups.append(group)
    return groups


def describe(group: Group) -> str:
    return " -> ".join(n.prim.name for n in group.nodes)

