"""Collectives on kiln tensors, in place as in PyTorch, over mpi4py's buffer (C speed) methods.

Each first checks that every rank passes a tensor of the same shape and dtype (and the same op
or src), raising CollectiveMismatchError on every rank otherwise: MPI would silently reduce part
of the data or misread the bytes. ``KILN_DIST_CHECK_COLLECTIVES=0`` turns the check off (see
`kiln.distributed.agreement`).

>>> t = kiln.tensor([float(dist.get_rank())])
>>> dist.all_reduce(t, op=dist.ReduceOp.SUM)      # t now holds 0 + 1 + ... + (world_size - 1)
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..tensor import Tensor
from .agreement import agree, describe
from .process_group import ProcessGroup, group as current_group
from .waiting import wait


class ReduceOp:
    """How `all_reduce` and `reduce_scatter` combine values: SUM, AVG, MAX, MIN, PRODUCT."""

    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"
    PRODUCT = "product"


_OPS = (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT)


class Work:
    """A collective started with ``async_op=True``; ``wait()`` finishes it (and its copy-back)."""

    def __init__(self, requests: list, what: str, group: ProcessGroup, finish: Callable[[], None]):
        self._requests = requests
        self._what = what
        self._group = group
        self._finish: Callable[[], None] | None = finish

    def wait(self, timeout: Any = None) -> bool:
        """Block until the collective is done and its result written into the tensors."""
        if self._finish is not None:
            if self._requests:
                wait(self._requests, self._what, self._group)
            finish, self._finish = self._finish, None
            finish()
        return True

    def is_completed(self) -> bool:
        """True once `wait` has finished the collective."""
        return self._finish is None


def _resolve_group(group: Any) -> ProcessGroup:
    if group is not None and not isinstance(group, ProcessGroup):
        raise TypeError(f"group must be None (the world) or a ProcessGroup, got {type(group).__name__}")
    return group or current_group()


def _host_array(t: Any, what: str, name: str = "tensor") -> np.ndarray:
    if not isinstance(t, Tensor):
        raise TypeError(f"kiln.distributed.{what}() expects a kiln.Tensor for {name}, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise NotImplementedError(f"kiln.distributed.{what}(): {name} is on {t.device}; collectives run on CPU "
                                  "tensors for now (GPU collectives through NCCL are planned). Fix: .cpu() it")
    return t._data


def _mpi_op(op: str, dtype: np.dtype, what: str) -> Any:
    from mpi4py import MPI  # noqa: PLC0415 - only reached in a multi-rank world, where it is loaded

    if op not in _OPS:
        raise ValueError(f"kiln.distributed.{what}(): op must be one of ReduceOp.SUM/AVG/MAX/MIN/PRODUCT, got {op!r}")
    return {ReduceOp.SUM: MPI.SUM, ReduceOp.AVG: MPI.SUM, ReduceOp.MAX: MPI.MAX, ReduceOp.MIN: MPI.MIN,
            ReduceOp.PRODUCT: MPI.PROD}[op]


def _check_op(op: str, dtype: np.dtype, what: str) -> None:
    if op not in _OPS:
        raise ValueError(f"kiln.distributed.{what}(): op must be one of ReduceOp.SUM/AVG/MAX/MIN/PRODUCT, got {op!r}")
    if op == ReduceOp.AVG and dtype.kind not in "fc":
        raise TypeError(f"kiln.distributed.{what}(): ReduceOp.AVG needs a floating-point tensor, got {dtype}; "
                        "use ReduceOp.SUM and divide, or cast to float first")


def _work_buffer(a: np.ndarray) -> np.ndarray:
    """`a` itself when MPI can write it in place, else a contiguous copy to write back afterwards."""
    return a if a.flags.c_contiguous and a.flags.writeable else np.ascontiguousarray(a)


def _run(requests: list, what: str, g: ProcessGroup, finish: Callable[[], None], async_op: bool) -> Work | None:
    work = Work(requests, what, g, finish)
    if async_op:
        return work
    work.wait()
    return None


def all_reduce(tensor: Tensor, op: str = ReduceOp.SUM, group: ProcessGroup | None = None,
               async_op: bool = False) -> Work | None:
    """Combine `tensor` across all ranks with `op`, in place: every rank ends with the result.

    Every rank must pass the same shape, dtype and op (checked; see the module docstring).
    """
    a = _host_array(tensor, "all_reduce")
    _check_op(op, a.dtype, "all_reduce")
    g = _resolve_group(group)
    if g.comm is None:
        return _run([], "all_reduce", g, lambda: None, async_op)
    from mpi4py import MPI  # noqa: PLC0415

    agree(g, describe("all_reduce", a, op=op))
    buf = _work_buffer(a)
    req = g.comm.Iallreduce(MPI.IN_PLACE, buf, _mpi_op(op, a.dtype, "all_reduce"))

    def finish() -> None:
        if op == ReduceOp.AVG:
            np.divide(buf, g.size, out=buf)
        if buf is not a:
            np.copyto(a, buf)
        tensor._bump_version()

    return _run([req], "all_reduce", g, finish, async_op)


def broadcast(tensor: Tensor, src: int = 0, group: ProcessGroup | None = None,
              async_op: bool = False) -> Work | None:
    """Copy rank `src`'s `tensor` into `tensor` on every other rank, in place.

    Every rank must pass the same shape, dtype and src (checked; see the module docstring).
    """
    a = _host_array(tensor, "broadcast")
    g = _resolve_group(group)
    if not isinstance(src, int) or not 0 <= src < g.size:
        raise ValueError(f"kiln.distributed.broadcast(src={src!r}): src must be a rank in 0..{g.size - 1}")
    if g.comm is None:
        return _run([], "broadcast", g, lambda: None, async_op)
    agree(g, describe("broadcast", a, root=src))
    buf = _work_buffer(a)
    req = g.comm.Ibcast(buf, root=src)

    def finish() -> None:
        if buf is not a:
            np.copyto(a, buf)
        if g.rank != src:
            tensor._bump_version()

    return _run([req], "broadcast", g, finish, async_op)


def all_gather(tensor_list: list[Tensor], tensor: Tensor, group: ProcessGroup | None = None,
               async_op: bool = False) -> Work | None:
    """Fill ``tensor_list[r]`` (one tensor per rank, shaped like `tensor`) with rank r's `tensor`.

    As in PyTorch, `tensor` must have the same shape and dtype on every rank (checked).
    """
    a = _host_array(tensor, "all_gather")
    g = _resolve_group(group)
    outs = _same_shaped_list(tensor_list, a, g, "all_gather", "tensor_list")
    if g.comm is None:
        return _run([], "all_gather", g, lambda: _scatter_into(outs, np.ascontiguousarray(a)[None]), async_op)
    agree(g, describe("all_gather", a))
    gathered = np.empty((g.size,) + a.shape, dtype=a.dtype)
    req = g.comm.Iallgather(np.ascontiguousarray(a), gathered)
    return _run([req], "all_gather", g, lambda: _scatter_into(outs, gathered), async_op)


def reduce_scatter(output: Tensor, input_list: list[Tensor], op: str = ReduceOp.SUM,
                   group: ProcessGroup | None = None, async_op: bool = False) -> Work | None:
    """Reduce ``input_list[r]`` across ranks with `op` and write the result into `output` on rank r.

    Every rank must pass the same output shape, dtype and op (checked; see the module docstring).
    """
    out = _host_array(output, "reduce_scatter", "output")
    _check_op(op, out.dtype, "reduce_scatter")
    g = _resolve_group(group)
    ins = _same_shaped_list(input_list, out, g, "reduce_scatter", "input_list")
    send = np.stack([_host_array(t, "reduce_scatter", "input_list") for t in ins])
    recv = np.empty(out.shape, dtype=out.dtype)

    def finish() -> None:
        if op == ReduceOp.AVG:
            np.divide(recv, g.size, out=recv)
        np.copyto(out, recv)
        output._bump_version()

    if g.comm is None:
        recv[...] = send[0]
        return _run([], "reduce_scatter", g, finish, async_op)
    agree(g, describe("reduce_scatter", out, op=op))
    req = g.comm.Ireduce_scatter_block(send, recv, _mpi_op(op, out.dtype, "reduce_scatter"))
    return _run([req], "reduce_scatter", g, finish, async_op)


def _same_shaped_list(items: Sequence[Tensor], like: np.ndarray, g: ProcessGroup, what: str,
                      name: str) -> list[Tensor]:
    items = list(items) if isinstance(items, (list, tuple)) else items
    if not isinstance(items, list) or len(items) != g.size:
        got = f"{len(items)} items" if isinstance(items, list) else type(items).__name__
        raise ValueError(f"kiln.distributed.{what}(): {name} must be a list of world_size={g.size} tensors, got "
                         f"{got}; build it with [kiln.empty_like(t) for _ in range(world_size)]")
    for i, t in enumerate(items):
        a = _host_array(t, what, f"{name}[{i}]")
        if a.shape != like.shape or a.dtype != like.dtype:
            raise ValueError(f"kiln.distributed.{what}(): {name}[{i}] is {a.dtype}{list(a.shape)}, expected "
                             f"{like.dtype}{list(like.shape)} like the other tensor")
    return items


def _scatter_into(outs: list[Tensor], stacked: np.ndarray) -> None:
    for t, row in zip(outs, stacked):
        np.copyto(t._data, row)
        t._bump_version()
