"""`Reducer`: averages gradients across ranks with bucketed in-place all-reduces over flat buffers.

Parameters are grouped (in reverse registration order, roughly the order backward produces
their gradients, and by dtype) into buckets of at most `bucket_cap_bytes`. kiln's backward
delivers a parameter's gradient as soon as no remaining node can add to it, and a
post-accumulate-grad hook on each parameter then copies its ``.grad`` into its bucket's flat
buffer. A bucket whose gradients are all in starts its non-blocking all-reduce (MPI
Iallreduce) at once, in bucket order (so every rank issues the same collectives in the same
order), while backward goes on computing the gradients of earlier layers: communication
overlaps computation. When the last parameter's gradient is in, the reducer waits for every
bucket and writes the averages into ``.grad``.

Inside a compiled whole training step the hooks see traced gradients instead, and
`TracedReduction` averages them with the `all_reduce_mean` primitive, so the plan replays
the collectives on every call.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...autograd import no_grad
from ...trace_state import trace_state
from ...tensor import Tensor
from ..parameter import Parameter
from .traced_reduction import TracedReduction


class _Bucket:
    """One flat buffer and the parameters whose gradients it holds."""

    def __init__(self, indices: list[int], offsets: list[int], size: int, dtype: np.dtype):
        self.indices = indices
        self.offsets = offsets
        self.buffer = np.zeros(size, dtype=dtype)
        self.pending = len(indices)
        self.request: Any = None
        self.done = False  # the all-reduce in flight has completed


class Reducer:
    """Owns the buckets and the per-parameter hooks of one `DistributedDataParallel`."""

    def __init__(self, params: Sequence[Parameter], group: Any, bucket_cap_bytes: int, find_unused: bool):
        self.params = list(params)
        self.group = group
        self.find_unused = find_unused
        self.sync = True
        self.buckets: list[_Bucket] = []
        self.where: list[tuple[int, int]] = [(0, 0)] * len(self.params)
        self._build_buckets(bucket_cap_bytes)
        self._arrived: set[int] = set()
        self._unused: list[int] = []
        self._next_launch = 0
        self._filled = 0
        self.sync_flag = Tensor._wrap(np.array(True), self.params[0]._device) if self.params else None
        self._traced = TracedReduction(self)
        self.handles = [p.register_post_accumulate_grad_hook(self._make_hook(i)) for i, p in enumerate(self.params)]

    def set_sync(self, sync: bool) -> None:
        """Whether backward averages gradients (False inside no_sync()); compiled steps read it per call."""
        if self.sync_flag is None:
            return
        if trace_state.tracer is not None or bool(self.sync_flag._data) != bool(sync):
            with no_grad():
                self.sync_flag.fill_(bool(sync))  # a kiln op: inside a compiled step it is a state write

    def _build_buckets(self, cap: int) -> None:
        current: dict[Any, tuple[list[int], list[int], int]] = {}
        order: list[tuple[Any, tuple[list[int], list[int], int]]] = []
        for i in reversed(range(len(self.params))):
            a = self.params[i]._data
            indices, offsets, size = current.get(a.dtype, ([], [], 0))
            if indices and (size + a.size) * a.itemsize > cap:
                order.append((a.dtype, (indices, offsets, size)))
                indices, offsets, size = [], [], 0
            indices.append(i)
            offsets.append(size)
            current[a.dtype] = (indices, offsets, size + a.size)
        order.extend(current.items())
        for dtype, (indices, offsets, size) in order:
            bucket = _Bucket(indices, offsets, size, np.dtype(dtype))
            for i, off in zip(indices, offsets):
                self.where[i] = (len(self.buckets), off)
            self.buckets.append(bucket)

    @property
    def bucket_sizes(self) -> list[int]:
        """How many parameters each bucket holds, in launch order."""
        return [len(b.indices) for b in self.buckets]

    @property
    def launched(self) -> int:
        """How many buckets of the current backward pass have started their all-reduce."""
        return self._next_launch

    def in_progress(self) -> bool:
        """True when some, but not all, gradients of the current backward pass have arrived."""
        return 0 < self._filled < len(self.params)

    def prepare(self, sync: bool, outputs: Any) -> None:
        """Called by each forward: whether the coming backward reduces, and which params it reaches."""
        self.sync = sync
        self._reset()
        if sync and self.find_unused:
            used = _reachable_leaves(outputs)
            self._unused = [i for i, p in enumerate(self.params) if id(p) not in used]
            for i in self._unused:
                grad = self.params[i].grad
                self._fill(i, None if grad is None else grad._data)

    def _reset(self) -> None:
        self._traced.reset()
        for b in self.buckets:
            b.pending = len(b.indices)
            b.request = None
            b.done = False
        self._arrived = set()
        self._unused = []
        self._next_launch = 0
        self._filled = 0

    def _make_hook(self, index: int):
        def hook(param: Tensor) -> None:
            self._on_accumulated(index)

        return hook

    def _on_accumulated(self, index: int) -> None:
        """Backward has written this pass's gradient (plus any accumulated under no_sync) into ``.grad``."""
        if trace_state.tracer is not None:  # backward inside a compiled whole training step
            self._traced.on_accumulated(index)
            return
        if not self.sync:
            return  # inside no_sync(): gradients accumulate locally
        if self._filled == len(self.params):  # a second backward after this round finished
            self._reset()
        grad = self.params[index].grad
        assert grad is not None  # the hook runs right after backward set it
        self._arrived.add(index)
        self._fill(index, grad._data)

    def _fill(self, index: int, local: np.ndarray | None) -> None:
        b_index, off = self.where[index]
        bucket = self.buckets[b_index]
        n = self.params[index]._data.size
        if local is None:
            bucket.buffer[off:off + n] = 0
        else:
            bucket.buffer[off:off + n] = local.reshape(-1)
        bucket.pending -= 1
        self._filled += 1
        self._launch_ready()
        if self._filled == len(self.params):
            self._finish()
        else:
            self._progress()

    def _progress(self) -> None:
        """Let MPI move the all-reduces in flight along (MPICH advances them only inside MPI calls)."""
        for bucket in self.buckets[:self._next_launch]:
            if bucket.request is not None and not bucket.done:
                bucket.done = bucket.request.Test()

    def _launch_ready(self) -> None:
        while self._next_launch < len(self.buckets) and self.buckets[self._next_launch].pending == 0:
            bucket = self.buckets[self._next_launch]
            if self.group.comm is not None:
                from mpi4py import MPI  # noqa: PLC0415 - a multi-rank world has it loaded

                bucket.request = self.group.comm.Iallreduce(MPI.IN_PLACE, bucket.buffer, MPI.SUM)
            self._next_launch += 1

    def _finish(self) -> None:
        from ...distributed.waiting import wait  # noqa: PLC0415 - cycle: distributed imports nn

        requests = [b.request for b in self.buckets if b.request is not None]
        if requests:
            wait(requests, "DistributedDataParallel gradient all-reduce", self.group)
        globally_used = self._globally_used()
        for b in self.buckets:
            if self.group.size > 1:
                np.divide(b.buffer, self.group.size, out=b.buffer)
            for i, off in zip(b.indices, b.offsets):
                p = self.params[i]
                reduced = b.buffer[off:off + p._data.size].reshape(p._data.shape)
                grad = p.grad
                if i in self._arrived and grad is not None and grad._data.flags.writeable:
                    np.copyto(grad._data, reduced)  # backward's own fresh buffer, in its layout
                elif i in self._arrived or globally_used is None or globally_used[i]:
                    p.grad = Tensor._wrap(reduced.copy(), p._device)

    def _globally_used(self) -> np.ndarray | None:
        """With find_unused_parameters: which params some rank's backward reached (None otherwise)."""
        if not self.find_unused:
            return None
        used = np.ones(len(self.params), dtype=np.int64)
        used[self._unused] = 0
        if self.group.comm is not None:
            from mpi4py import MPI  # noqa: PLC0415

            from ...distributed.waiting import wait  # noqa: PLC0415

            wait(self.group.comm.Iallreduce(MPI.IN_PLACE, used, MPI.SUM), "find_unused_parameters", self.group)
        return used > 0

    def remove(self) -> None:
        """Unregister the hooks (the parameters then behave as without DDP)."""
        for h in self.handles:
            h.remove()
        self.handles = []


def _reachable_leaves(outputs: Any) -> set[int]:
    """ids of the leaf tensors the autograd graph of `outputs` reaches."""
    seen_nodes: set[int] = set()
    leaves: set[int] = set()
    stack = [t._node for t in _tensors_in(outputs) if t._node is not None]
    for t in _tensors_in(outputs):
        if t._node is None and t.requires_grad:
            leaves.add(id(t))
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        inputs = node.inputs or ()
        for inp, edge in zip(inputs, node.edges):
            if edge is None:
                leaves.add(id(inp))
            elif edge is not False:
                stack.append(edge)
    return leaves


def _tensors_in(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_in(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_in(v)]
    return []
