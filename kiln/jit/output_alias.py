"""Returned tensors that alias: what eager returns by identity or as a view, a replay returns too.

A plan computes its outputs into fresh arrays. Eager code, though, may return
- a tensor it was given or holds: an argument, a parameter, a buffer, an optimizer state
  entry, a ``.grad``, or the same tensor twice (``return y, y``);
- a view of one (``x.add_(1); return x[1:]``; ``return y, y[0]``), through which later
  writes show, as writes to it show in its base.

`find_aliases` records, while the trace's real tensors are at hand, where each such output
comes from; `OutputAliases.apply` rebuilds them on each replay from the live tensors (after
the plan wrote its state back), and the plan's copy of the values is dropped:
- an output that *is* such a tensor comes back as that object;
- a view reached from such a tensor through view nodes of the graph (primitives that are
  views in eager: reshape, permute, expand, a slice, detach) is rebuilt by running those
  nodes' kernels on the live tensor's array, so it is a view exactly where eager's would
  be, for this call's sizes too;
- any other output that shares memory with such a tensor (a view taken before an in-place
  update of it) is rebuilt at the byte offset and strides it had while tracing; that holds
  only while the tensor keeps the layout it had then, which `stale_reason` checks before a
  replay (a changed layout retraces).

Outputs that share memory in eager that no returned or input tensor covers (two overlapping
slices of one intermediate the function does not return) come back as separate tensors;
`notes` says so, and kiln.compile warns. The other way round, outputs that share the plan's
memory where eager's did not (two equal values the plan computed once, one returned through a
view) get fresh memory on each replay (`OutputAliases.separate`).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..tensor import Tensor
from .ir import Graph, Value
from .step_replay import memory_owner, write_target
from .symbolic import resolve

class Source(NamedTuple):
    """Where an aliased output's tensor is found on each call.

    kind: "arg" (ref: leaf index), "tensor" (ref: a parameter, buffer or captured tensor),
    "optstate" (ref: (optimizer, param, key)), "grad" (ref: a grad target, see step_binding)
    or "output" (ref: the index of an output that is not itself a view).
    """

    kind: str
    ref: Any


class Alias(NamedTuple):
    """Output `index` is `source` itself (`how` is None), a chain of view kernels applied to it
    (``("views", ((kernel, params), ...))``) or a view at a fixed place in its memory
    (``("strided", offset, shape, strides, source shape, source strides, dtype)``)."""

    index: int
    source: Source
    how: tuple | None


def _address(array: Any) -> int:
    if isinstance(array, np.ndarray):
        return array.__array_interface__["data"][0]
    return array.data.ptr  # cupy


def _bounds(array: Any) -> tuple[int, int]:
    """[first byte, last byte + 1) of the memory an array's elements occupy."""
    start = end = _address(array)
    if array.size == 0:
        return start, start
    for n, stride in zip(array.shape, array.strides):
        if stride < 0:
            start += stride * (n - 1)
        else:
            end += stride * (n - 1)
    return start, end + array.itemsize


def _strided_into(source: Any, how: tuple) -> Any | None:
    """The strided view `how` describes into `source`'s memory, or None if `source` changed layout."""
    _, offset, shape, strides, source_shape, source_strides, dtype = how
    if source.shape != source_shape or source.strides != source_strides or source.dtype != dtype:
        return None
    owner = memory_owner(source)
    start = _address(source) - _address(owner) + offset
    if isinstance(source, np.ndarray):
        return np.ndarray(shape, dtype, buffer=owner, offset=start, strides=strides)
    import cupy  # noqa: PLC0415 - only GPU plans get here

    return cupy.ndarray(shape, dtype, memptr=owner.data + start, strides=strides)


def _through_views(source: Any, chain: tuple, xp: Any, dims: dict | None) -> Any:
    for kernel, params in chain:
        source = kernel(xp, source, **(resolve(params, dims) if dims is not None else params))
        if isinstance(source, np.generic):  # a NumPy scalar from indexing: a 0-d array, as eager makes it
            source = np.asarray(source)
    return source


class OutputAliases:
    """The aliased outputs of one plan, rebuilt from live tensors on every replay."""

    def __init__(self, aliases: list[Alias], notes: list[str], eager_groups: tuple[int, ...] = ()):
        self.aliases = tuple(sorted(aliases, key=lambda a: a.how is not None))  # identities first
        self.notes = notes  # outputs that share memory in eager but come back as separate tensors
        self.by_identity = {a.index: a.source for a in aliases if a.how is None}
        # output k's memory in eager: outputs with equal numbers shared memory, others did not
        self.eager_groups = eager_groups

    def separate(self, tensors: list[Tensor]) -> list[Tensor]:
        """Give fresh memory to each output that shares the plan's memory with an earlier output
        where eager's did not: a plan may compute two equal values once (two identical gathers
        merged) and return a view of it too, and a write through one output must not show in
        the other. The tensors keep their identity (and autograd node); only their arrays change."""
        if len(tensors) < 2:
            return tensors
        first: dict[int, int] = {}  # id of a memory owner -> the eager group of its first output
        for k, t in enumerate(tensors):
            key = id(memory_owner(t._data))
            group = self.eager_groups[k] if k < len(self.eager_groups) else -1 - k
            seen = first.setdefault(key, group)
            if seen != group:
                t._data = t._data.copy()
                t._base = None
        return tensors

    def __bool__(self) -> bool:
        return bool(self.aliases)

    def stale_reason(self, leaves: list) -> str | None:
        """Why a strided output cannot be rebuilt for this call (its input's memory layout changed)."""
        for alias in self.aliases:
            if alias.how is None or alias.how[0] != "strided" or alias.source.kind not in ("arg", "tensor"):
                continue
            data = _resolve(alias.source, leaves, [])._data
            _, _, _, _, shape, strides, dtype = alias.how
            if data.shape != shape or data.strides != strides or data.dtype != dtype:
                return (f"output {alias.index} shares memory with an input whose layout changed (shape {shape} -> "
                        f"{data.shape}, strides {strides} -> {data.strides})")
        return None

    def apply(self, tensors: list[Tensor], leaves: list, dims: dict | None = None) -> list[Tensor]:
        """The outputs with aliases rebuilt: sources themselves, or views of their live memory."""
        tensors = list(tensors)
        for alias in self.aliases:
            source = _resolve(alias.source, leaves, tensors)
            if alias.how is None:
                tensors[alias.index] = source
                continue
            if alias.how[0] == "views":
                array = _through_views(source._data, alias.how[1], source._device.xp, dims)
            else:
                array = _strided_into(source._data, alias.how)
                if array is None:  # optimizer state or a .grad laid out unlike its trace: keep the plan's copy
                    continue
            out = tensors[alias.index]
            out._data = array
            if memory_owner(array) is memory_owner(source._data):
                out._base = source._base if source._base is not None else source
        return tensors


def _resolve(source: Source, leaves: list, outputs: list) -> Tensor:
    kind, ref = source
    if kind == "output":
        return outputs[ref]
    return write_target(kind, ref, leaves)


def source_of_spec(kind: str, ref: Any) -> Source | None:
    """The Source of a graph input or state-write target of `kind` (None for rng and literals)."""
    if kind in ("arg", "optstate", "grad"):
        return Source(kind, ref)
    if kind in ("param", "buffer", "captured", "tensor"):
        return Source("tensor", ref)
    return None


def find_aliases(outputs: list[Tensor], sources: list[tuple[Source, Tensor]], graph: Graph,
                 roots: dict[int, Source]) -> OutputAliases:
    """Match each traced output (`outputs`, the user's tensors; their values are the first
    outputs of `graph`) against the tensors it may be or view.

    `sources` are the tensors outside the plan as they are at the end of the trace (inputs,
    state the step set); `roots` maps the id of a graph value to the source whose live
    tensor holds it after a replay (inputs, and values written back into state).
    """
    producers = {node.out.id: node for node in graph.nodes}
    by_id = {id(t): s for s, t in sources}
    roots = dict(roots)
    aliases: list[Alias] = []
    for k, t in enumerate(outputs):  # identities; and non-view outputs become roots of later views
        same = by_id.get(id(t))
        if same is not None:
            aliases.append(Alias(k, same, None))
            continue
        by_id[id(t)] = Source("output", k)
        value = graph.outputs[k]
        if value.id not in producers or not producers[value.id].prim.is_view:
            roots.setdefault(value.id, Source("output", k))
    candidates = list(sources) + [(Source("output", k), t) for k, t in enumerate(outputs)
                                  if by_id.get(id(t)) == Source("output", k)]
    for k, t in enumerate(outputs):
        if by_id[id(t)] != Source("output", k):
            continue  # an identity
        found = _view_chain(graph.outputs[k], producers, roots)
        if found is not None and found[0] != Source("output", k):
            aliases.append(Alias(k, found[0], ("views", found[1])))
            continue
        strided = _strided_source(t, k, candidates)
        if strided is not None:
            aliases.append(Alias(k, *strided))
    owners: dict[int, int] = {}
    groups = tuple(owners.setdefault(id(memory_owner(t._data)), len(owners)) for t in outputs)
    return OutputAliases(aliases, _unrebuilt_sharing(outputs, aliases), groups)


def _unrebuilt_sharing(outputs: list[Tensor], aliases: list[Alias]) -> list[str]:
    """Pairs of outputs that share memory in eager where no alias rebuilds that sharing: neither
    is rebuilt from the other, and they are not rebuilt from one source."""
    source = {a.index: a.source for a in aliases}

    def root(k: int) -> Source:
        return source.get(k, Source("output", k))

    notes = []
    for k, t in enumerate(outputs):
        for j in range(k):
            u = outputs[j]
            if u is t or memory_owner(u._data) is not memory_owner(t._data):
                continue
            if root(k) == root(j) or root(k) == Source("output", j) or root(j) == Source("output", k):
                continue
            notes.append(f"output {k} shares memory with output {j} outside the memory either covers "
                         "(overlapping views of a tensor the function does not return)")
            break
    return notes


def _view_chain(value: Value, producers: dict, roots: dict[int, Source]) -> tuple[Source, tuple] | None:
    """(root source, view kernels from it to `value`) when `value` is a root or views of one."""
    chain = []
    while value.id not in roots:
        node = producers.get(value.id)
        if node is None or not node.prim.is_view or len(node.inputs) != 1:
            return None
        chain.append((node.prim.kernel, node.params))
        value = node.inputs[0]
    return roots[value.id], tuple(reversed(chain))


def _strided_source(t: Tensor, k: int, candidates: list[tuple[Source, Tensor]]) -> tuple[Source, tuple] | None:
    """(source, strided view) for the first input or state tensor whose memory holds all of t's."""
    data = t._data
    owner = memory_owner(data)
    if not (isinstance(owner, np.ndarray) and owner.flags.owndata) and type(owner).__module__.split(".")[0] != "cupy":
        return None  # memory NumPy does not own (np.frombuffer): no view can be rebuilt into it
    lo, hi = _bounds(data)
    for source, u in candidates:
        if source.kind == "output" or memory_owner(u._data) is not owner:
            continue
        u_lo, u_hi = _bounds(u._data)
        if u_lo <= lo and hi <= u_hi:
            u_data = u._data
            return source, ("strided", _address(data) - _address(u_data), data.shape, data.strides, u_data.shape,
                            u_data.strides, data.dtype)
    return None
