"""Graph rewrites that put fused kernels in a graph: row groups, then elementwise groups.

Each group found (rows.py, elementwise_groups.py) becomes one node whose primitive is a RowKernel or
a FusedElementwise; a row kernel with several outputs yields a tuple that ``unpack[k]``
nodes take apart. The kernels are compiled on first use, so a native plan (runtime.py),
which renders the groups into its own source, builds none of them.
"""
from __future__ import annotations

import heapq

from ...ir import Graph, Node, Value
from . import rows
from .codegen import FusedElementwise
from .elementwise_groups import find_groups
from .rowcode import RowKernel, Unpack
from .rows import find_row_groups


def fuse(graph: Graph, min_elements: int | None = None, min_nodes: int | None = None,
         row_seeds: set[int] | None = None) -> Graph:
    """A copy of `graph` with row groups replaced by RowKernel nodes, then elementwise groups by
    FusedElementwise nodes (limits: see fusion.find_groups; `row_seeds`: see rows.find_row_groups)."""
    return fuse_elementwise(fuse_rows(graph, min_elements, min_nodes, row_seeds), min_elements, min_nodes)


def fuse_rows(graph: Graph, min_elements: int | None = None, min_nodes: int | None = None,
              row_seeds: set[int] | None = None) -> Graph:
    """A copy of `graph` with each row group replaced by one RowKernel node.

    A group with several outputs yields a tuple that `unpack[k]` nodes take apart. Members
    the group keeps (rows.py) stay in the graph for their outside users. The nodes are then
    put back in a topological order close to the original one.
    """
    groups = find_row_groups(graph, min_elements, rows.MIN_NODES if min_nodes is None else min_nodes, row_seeds)
    if not groups:
        return graph
    pos = {id(n): i for i, n in enumerate(graph.nodes)}
    replaced: set[int] = set()
    units: list[tuple[int, list[Node]]] = []  # (position, nodes that must stay together in this order)
    for group in groups:
        kernel = RowKernel(group)
        if len(group.outputs) == 1:
            nodes = [Node(kernel, group.inputs, {}, group.outputs[0])]
        else:
            packed = Value((len(group.outputs),), group.outputs[0].dtype)
            nodes = [Node(kernel, group.inputs, {}, packed)]
            nodes += [Node(Unpack(k), [packed], {}, v) for k, v in enumerate(group.outputs)]
        units.append((max(pos[id(n)] for n in group.nodes), nodes))
        replaced.update(id(n) for n in group.nodes if id(n) not in group.kept)
    units += [(pos[id(n)], [n]) for n in graph.nodes if id(n) not in replaced]
    out = graph.copy()
    out.nodes = _topological(units)
    return out


def _topological(units: list[tuple[int, list[Node]]]) -> list[Node]:
    """The units' nodes in dependency order, each unit contiguous, ties broken by position."""
    made_by = {n.out.id: k for k, (_, nodes) in enumerate(units) for n in nodes}
    waits: list[set[int]] = []
    feeds: dict[int, list[int]] = {}
    for k, (_, nodes) in enumerate(units):
        inside = {n.out.id for n in nodes}
        deps = {made_by[v.id] for n in nodes for v in n.inputs if v.id in made_by and v.id not in inside}
        waits.append(deps)
        for d in deps:
            feeds.setdefault(d, []).append(k)
    ready = [(units[k][0], k) for k in range(len(units)) if not waits[k]]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        _, k = heapq.heappop(ready)
        order += units[k][1]
        for user in feeds.get(k, []):
            waits[user].discard(k)
            if not waits[user]:
                heapq.heappush(ready, (units[user][0], user))
    if len(order) != sum(len(nodes) for _, nodes in units):
        raise AssertionError("row fusion made a cycle: a row group is not convex")
    return order


def fuse_elementwise(graph: Graph, min_elements: int | None = None, min_nodes: int | None = None) -> Graph:
    """A copy of `graph` with each elementwise fusion group replaced by one FusedElementwise node."""
    groups = find_groups(graph, min_elements, min_nodes)
    if not groups:
        return graph
    fused_at: dict[int, Node] = {}
    members: set[int] = set()
    for group in groups:
        fused_at[id(group.root)] = Node(FusedElementwise(group), group.inputs, {}, group.root.out)
        members.update(id(n) for n in group.nodes)
    out = graph.copy()
    out.nodes = [fused_at.get(id(n), n) for n in graph.nodes if id(n) not in members or id(n) in fused_at]
    return out
