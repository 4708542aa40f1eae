"""Row kernels: reductions over trailing axes fused with their elementwise prologue and epilogue.

A *row space* is a full shape F split at `split`: the input is viewed as [outer, inner]
with outer = prod(F[:split]) rows and the reduced axes F[split:] forming one contiguous
block of `inner` elements per row. A row group is a set of graph nodes in one row space:

* reductions: `sum` / `max` over exactly the axes split.. of an F-shaped float32/float64
  operand (`mean` is a sum followed by the graph's own `div`);
* full nodes: fusible elementwise nodes (`Primitive.fuses`, broadcasts included) of shape F,
  reading full-size inputs, inputs broadcast along a leading or trailing block (the
  index forms of elementwise_groups.index_form), per-row values and earlier reductions' results;
* row nodes: fusible elementwise nodes (and reshapes) on per-row values: shape
  F[:split] + (1,)*k (keepdims) or F[:split];
* `stop_gradient` (detach) at either level, as the identity it is.

The generated C (rowcode.py) loops over rows and, per row, runs the members in order:
each reduction is a loop over the row computing its prologue (full nodes) into a scratch
row and reducing it; row nodes are scalar statements between those loops; a final loop
writes the full-size outputs (the epilogue). Full nodes are recomputed in every loop
that needs them rather than stored.

Grouping (find_row_groups) seeds a group at each eligible reduction, last first, and
grows it to a fixpoint: backwards through producers and forwards through consumers that
fit the row space, keeping the group convex (no path leaves the group and comes back),
so the group can run as one node. Every member value used outside becomes an output,
except a full node whose outside users are all fusible elementwise nodes: that node is
*kept* (duplicated): the original stays in the graph, where elementwise fusion recomputes
it from its inputs instead of reading a full-size temporary. Members left without a use
are pruned.

Exactness (fused == NumPy bit for bit, except float32 transcendentals, which fuse within
4 ulp of NumPy: `Primitive.transcendental`): a sum adds each row in NumPy's pairwise order,
or left to right where the Sum kernel's small-window path (reduce.window_reduce) would
run; max reductions are order-free except for the sign of a zero maximum, which the
kernel detects and answers by evaluating the group with NumPy. NumPy sums rows in that
order only in C-ordered arrays, and lays its results out after their operands, so
(layouts.py) a sum joins a group only where eager sums a C-ordered array, a full node
only where eager's result is C-ordered (as the kernel's outputs are), and at run time
the kernel evaluates with NumPy when a full-size input is not C-ordered. Symbolic
shapes and other dtypes are not grouped.
"""
from __future__ import annotations

import math
from typing import Iterable

from ...ir import Graph, Node, Value
from ...symbolic import is_symbolic, lowering_for_every_size
from ....ops.reduce import windowed
from . import elementwise_groups
from .layouts import eager_layouts

FLOATS = {"float32", "float64"}
MIN_NODES = 2  # a reduction alone is left to NumPy


def _static(shape: tuple) -> bool:
    return all(isinstance(d, int) and not hasattr(d, "expr") for d in shape)


class Space:
    """A full shape split into [outer, inner] rows: the reduced axes are F[split:]."""

    def __init__(self, shape: tuple, split: int):
        self.shape = tuple(shape)
        self.split = split
        self.outer = math.prod(self.shape[:split])
        self.inner = math.prod(self.shape[split:])
        self.row_shapes = {self.shape[:split] + (1,) * (len(self.shape) - split), self.shape[:split]}

    def key(self) -> tuple:
        return self.shape, self.split

    def form(self, shape: tuple) -> str | None:
        """How a value of `shape` is read inside a full node: full / row / col (per row) / scalar."""
        return elementwise_groups.index_form(tuple(shape), self.shape, self.split)

    def __repr__(self) -> str:
        return f"Space({self.shape}, split={self.split})"


def reduction_space(node: Node) -> Space | None:
    """The row space of an eligible reduction node, else None."""
    if node.prim.reduction is None or len(node.inputs) != 1:
        return None
    x = node.inputs[0]
    shape = tuple(x.shape)
    if not shape or x.dtype.name not in FLOATS or node.out.dtype.name != x.dtype.name:
        return None
    axes = tuple(node.params.get("axes", ()))
    if not axes or axes != tuple(range(axes[0], len(shape))):
        return None
    # (symbolic rows only where code is lowered for every size, see size_guards.py; the reduced axes never: the
    # order of a row's sum changes with its length)
    if not _static(shape[axes[0]:]) or not (_static(shape[:axes[0]]) or lowering_for_every_size()):
        return None
    space = Space(shape, axes[0])
    if space.inner < 2 or space.outer < 1:
        return None
    return space


def sequential(node: Node) -> bool:
    """Whether the Sum/Max kernel reduces this node's rows left to right (reduce.window_reduce).

    Asked of the test the kernel asks (`windowed`), so the generated code follows the kernel's own choice;
    it depends on the whole size (a guard where the rows are symbolic).
    """
    return windowed(tuple(node.inputs[0].shape), tuple(node.params["axes"]))


def _elementwise(node: Node) -> bool:
    return elementwise_groups._fusible(node)


def _fuses_with(user: Node, v: Value) -> bool:
    """Whether elementwise fusion can put `user` in one loop with the producer of `v` (the rules of
    elementwise_groups.py)."""
    return _elementwise(user) and tuple(user.out.shape) == tuple(v.shape) and \
        elementwise_groups.choose_split([tuple(w.shape) for w in user.inputs], tuple(user.out.shape)) is not None


def level(node: Node, space: Space) -> str | None:
    """"reduce", "full" or "row" when `node` can be a member of a group in `space`, else None."""
    if is_symbolic(node.params):  # a group falls back to its nodes' NumPy kernels, which need plain params
        return None
    if node.prim.reduction is not None:
        other = reduction_space(node)
        return "reduce" if other is not None and other.key() == space.key() else None
    shape = tuple(node.out.shape)
    if node.prim.identity:
        if node.out.dtype.name not in elementwise_groups.DTYPES or not _static(node.inputs[0].shape):
            return None
        if tuple(node.inputs[0].shape) == shape == space.shape:  # (detach)
            return "full"
        if shape in space.row_shapes and tuple(node.inputs[0].shape) in space.row_shapes:
            return "row"
        return None
    if not _elementwise(node):
        return None
    if shape == space.shape:
        return "full"
    if shape in space.row_shapes and not node.prim.broadcast:
        return "row"
    return None


class RowGroup:
    """A row kernel: members in topological order, external inputs, outputs, kept originals."""

    def __init__(self, space: Space, nodes: list[Node], levels: dict[int, str], outputs: list[Value],
                 kept: set[int]):
        self.space = space
        self.nodes = nodes
        self.levels = levels  # id(node) -> "reduce" / "full" / "row"
        self.outputs = outputs
        self.kept = kept  # ids of member nodes whose original also stays in the graph
        self.inputs = elementwise_groups.external_inputs(nodes)
        self.sequential = {id(n): sequential(n) for n in nodes if levels[id(n)] == "reduce"}
        self.broadcast_inputs: set[int] = set()  # inputs eager sees as broadcast views (expand outputs)

    @property
    def reductions(self) -> list[Node]:
        return [n for n in self.nodes if self.levels[id(n)] == "reduce"]

    def strict_inputs(self) -> list[int]:
        """Indices of the inputs a sum reduces directly: NumPy adds a row pairwise only in a
        C-contiguous array (the other full-size inputs must only be C-ordered, or broadcast views
        where eager also reads one: see rowcode.RowKernel.kernel)."""
        index = {v.id: k for k, v in enumerate(self.inputs)}
        return sorted({index[n.inputs[0].id] for n in self.reductions
                       if n.prim.reduction.order == "pairwise" and n.inputs[0].id in index})


def describe(group: RowGroup) -> str:
    return " -> ".join(n.prim.name for n in group.nodes)


class _Grower:
    """Grows one group in one row space over a graph, keeping it convex."""

    def __init__(self, graph: Graph, assigned: set[int]):
        self.graph = graph
        self.pos = {id(n): i for i, n in enumerate(graph.nodes)}
        self.producer = {n.out.id: n for n in graph.nodes}
        self.users: dict[int, list[Node]] = {}
        for n in graph.nodes:
            for v in n.inputs:
                self.users.setdefault(v.id, []).append(n)
        self.external = {v.id for v in graph.outputs} | {w.value.id for w in graph.state_writes}
        self.assigned = assigned
        self.formed: dict[int, list[Node]] = {}  # id(member of an earlier group) -> that group's nodes
        self.formed_span = (len(graph.nodes), -1)  # first and last position of any earlier group's member
        self.layouts = eager_layouts(graph)

    def form(self, group: "RowGroup") -> None:
        """Record a finished group: later groups see it as one node (it will run as one)."""
        for n in group.nodes:
            self.formed[id(n)] = group.nodes
        first, last = self.formed_span
        spots = [self.pos[id(n)] for n in group.nodes]
        self.formed_span = (min(first, *spots), max(last, *spots))

    # ---- legality -------------------------------------------------------------------------
    def _value_fits(self, v: Value, consumer_level: str, out_shape: tuple, space: Space,
                    members: dict[int, str]) -> bool:
        """Whether a member of `consumer_level` can read `v` (a member's value or an external one)."""
        p = self.producer.get(v.id)
        inner_level = members.get(id(p)) if p is not None else None
        if consumer_level == "full":
            if inner_level in ("row", "reduce"):
                return space.form(v.shape) == "col"  # a per-row value broadcast along the row
            if inner_level == "full":
                return True
            form = space.form(v.shape)
            if form == "full" and self.layouts.get(v.id, "C") == "other":
                return False  # the kernel would evaluate with NumPy on every call (rowcode.RowKernel.kernel)
            return form is not None and v.dtype.name in elementwise_groups.DTYPES
        # row level: per-row values of the same shape, or one value for all rows
        if inner_level == "full":
            return False
        if v.dtype.name not in elementwise_groups.DTYPES or not _static(v.shape):
            return False
        return tuple(v.shape) == tuple(out_shape) or math.prod(v.shape) == 1 and len(v.shape) <= len(out_shape)

    def _operands_ok(self, node: Node, lvl: str, space: Space, members: dict[int, str]) -> bool:
        """Whether a member of level `lvl` can read every operand of `node` given `members`."""
        if lvl == "reduce":
            (x,) = node.inputs
            p = self.producer.get(x.id)
            inner_level = members.get(id(p)) if p is not None else None
            if node.prim.reduction.order == "pairwise" and self.layouts.get(x.id, "C") != "C":
                return False  # eager NumPy sums this array in an order of its own
            if inner_level == "full":
                return True
            return inner_level is None and space.form(x.shape) == "full"
        if lvl == "row" and node.prim.identity:  # a reshape between row shapes
            (x,) = node.inputs
            p = self.producer.get(x.id)
            return (members.get(id(p)) if p is not None else None) != "full"
        out_shape = tuple(node.out.shape)
        return all(self._value_fits(v, lvl, out_shape, space, members) for v in node.inputs)

    def _fits(self, node: Node, space: Space, members: dict[int, str]) -> str | None:
        """The level `node` would have as a member, when it and its member users can read their operands."""
        lvl = level(node, space)
        if lvl is None:
            return None
        if lvl == "full" and self.layouts.get(node.out.id) == "other":
            return None  # eager lays it out in another order: a C-ordered stand-in could change later sums
        tentative = {**members, id(node): lvl}
        if not self._operands_ok(node, lvl, space, tentative):
            return None
        for u in self.users.get(node.out.id, []):
            if id(u) in members and not self._operands_ok(u, members[id(u)], space, tentative):
                return None
        return lvl

    def _reaches(self, starts: Iterable[Node], members: dict[int, str], forward: bool, bound: int) -> bool:
        """Whether a path from `starts` through non-members reaches a member (within `bound`).

        An earlier group counts as one node: reaching one of its members reaches the users
        (forward) or producers (backward) of all of them, since it will run as one node; two
        groups that are each convex could otherwise still wait on each other. Such a jump can
        lead back into range, so a node past `bound` is cut off only when it is also past every
        earlier group's members.
        """
        first, last = self.formed_span
        stack = list(starts)
        seen: set[int] = set()
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            if id(n) in members:
                return True
            group = self.formed.get(id(n))
            around = group if group is not None else [n]
            if group is not None:  # the group is expanded once: its other members would add the same nodes
                if any(id(m) in members for m in group):
                    return True
                seen.update(id(m) for m in group)
            if forward:
                if self.pos[id(n)] > max(bound, last):
                    continue
                for m in around:
                    stack.extend(self.users.get(m.out.id, []))
            else:
                if self.pos[id(n)] < min(bound, first):
                    continue
                for m in around:
                    stack.extend(p for p in (self.producer.get(v.id) for v in m.inputs) if p is not None)
        return False

    def _convex_with(self, node: Node, members: dict[int, str], backward: bool) -> bool:
        """Whether the group stays convex with `node` added: no path leaves `node` and comes back
        into the group, and none leaves the group and arrives at `node`.

        For a producer (`backward`) only the first kind can exist in the graph itself, for a
        consumer only the second, but through an earlier group (one node, see _reaches) both can.
        """
        nodes = self._nodes(members)
        users = [u for u in self.users.get(node.out.id, []) if id(u) not in members]
        if self._reaches(users, members, True, max(self.pos[id(m)] for m in nodes)):
            return False
        producers = [p for p in (self.producer.get(v.id) for v in node.inputs) if p is not None and id(p) not in members]
        return not self._reaches(producers, members, False, min(self.pos[id(m)] for m in nodes))

    def _nodes(self, members: dict[int, str]) -> list[Node]:
        return [self.graph.nodes[self.pos[k]] for k in members]

    # ---- growth ---------------------------------------------------------------------------
    def grow(self, seed: Node, space: Space) -> dict[int, str]:
        members: dict[int, str] = {id(seed): "reduce"}
        changed = True
        while changed:
            changed = False
            for m in sorted(self._nodes(members), key=lambda n: -self.pos[id(n)]):
                for v in m.inputs:  # backwards: producers
                    p = self.producer.get(v.id)
                    if p is None or id(p) in members or id(p) in self.assigned:
                        continue
                    lvl = self._fits(p, space, members)
                    if lvl is not None and self._convex_with(p, members, backward=True):
                        members[id(p)] = lvl
                        changed = True
            for m in sorted(self._nodes(members), key=lambda n: self.pos[id(n)]):
                for u in self.users.get(m.out.id, []):  # forwards: consumers
                    if id(u) in members or id(u) in self.assigned:
                        continue
                    lvl = self._fits(u, space, members)
                    if lvl is not None and self._convex_with(u, members, backward=False):
                        members[id(u)] = lvl
                        changed = True
        return members

    def finish(self, members: dict[int, str], space: Space, min_elements: int | None = None,
               min_nodes: int = MIN_NODES) -> RowGroup | None:
        """Decide outputs and kept originals, prune members nobody needs, build the group."""
        while members:
            nodes = sorted(self._nodes(members), key=lambda n: self.pos[id(n)])
            out_ids, kept = self._exits(nodes, members)
            dead = [id(n) for n in nodes if n.out.id not in out_ids
                    and not any(id(u) in members for u in self.users.get(n.out.id, []))]
            if not dead:
                break
            for k in dead:
                del members[k]
        if not members or not any(lvl == "reduce" for lvl in members.values()) or len(members) < min_nodes:
            return None
        if math.prod(space.shape) < (elementwise_groups.MIN_ELEMENTS if min_elements is None else min_elements):
            return None
        outputs = [n.out for n in nodes if n.out.id in out_ids]
        group = RowGroup(space, nodes, dict(members), outputs, kept)
        group.broadcast_inputs = {k for k, v in enumerate(group.inputs) if self.layouts.get(v.id) == "bcast"}
        return group

    def _exits(self, nodes: list[Node], members: dict[int, str]) -> tuple[set[int], set[int]]:
        """(ids of member values the group must output, ids of members whose original stays).

        A member value read outside is an output, except a full node read outside only by
        elementwise nodes: its original is kept there, to be recomputed (by elementwise fusion)
        rather than stored. A kept original reads its operands outside too, so they become
        outputs or kept in turn.
        """
        out_ids: set[int] = set()
        kept: set[int] = set()
        changed = True
        while changed:
            changed = False
            for n in reversed(nodes):
                if id(n) in kept or n.out.id in out_ids:
                    continue
                readers = [u for u in self.users.get(n.out.id, []) if id(u) not in members or id(u) in kept]
                if not readers and n.out.id not in self.external:
                    continue
                if n.prim.broadcast and n.out.id not in self.external or \
                        members[id(n)] == "full" and n.out.id not in self.external \
                        and all(_fuses_with(u, n.out) for u in readers):
                    kept.add(id(n))  # (an expand's original is a view: cheaper than any stand-in)
                else:
                    out_ids.add(n.out.id)
                changed = True
        return out_ids, kept


def find_row_groups(graph: Graph, min_elements: int | None = None, min_nodes: int = MIN_NODES,
                    seeds: set[int] | None = None) -> list[RowGroup]:
    """Row groups over `graph`, seeded at its eligible reductions from the last one back.

    `min_elements` defaults to elementwise_groups.MIN_ELEMENTS (read at call time); a native plan passes 1
    for both limits (a lone reduction is then a row kernel too). `seeds`, when given, holds the
    ids of the only reduction nodes a group may start from.
    """
    limit = elementwise_groups.MIN_ELEMENTS if min_elements is None else min_elements
    assigned: set[int] = set()
    grower = _Grower(graph, assigned)
    groups = []
    for node in reversed(graph.nodes):
        if id(node) in assigned or seeds is not None and id(node) not in seeds:
            continue
        space = reduction_space(node)
        if space is None or math.prod(space.shape) < limit:
            continue
        if grower._fits(node, space, {}) is None:
            continue
        members = grower.grow(node, space)
        group = grower.finish(members, space, limit, min_nodes)
        if group is None:
            continue
        assigned.update(id(n) for n in group.nodes)
        grower.form(group)
        groups.append(group)
    return groups
