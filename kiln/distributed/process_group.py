"""The process group: which rank this process is, how many there are, and the MPI communicator.

A process started without an MPI launcher is a world of one: `init_process_group` is then a
no-op that needs no MPI at all, and every collective returns its input unchanged.

>>> import kiln.distributed as dist
>>> dist.init_process_group()          # under `python -m kiln.distributed.run -n 4 train.py`
>>> dist.get_rank(), dist.get_world_size()
(2, 4)
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .agreement import CollectiveMismatchError, agree, checks_disagree, checks_from, describe
from .faults import install_abort_on_error, uninstall_abort_on_error
from .mpi import launched_world_size, load_mpi
from .waiting import wait

DEFAULT_TIMEOUT = timedelta(minutes=30)


@dataclass
class ProcessGroup:
    """The world: `comm` is the MPI communicator (None in a world of one).

    `check_collectives`: whether each collective first checks that all ranks pass matching
    tensors (see `kiln.distributed.agreement`).
    """

    rank: int
    size: int
    comm: Any
    timeout: timedelta
    check_collectives: bool = True


_group: ProcessGroup | None = None


def _timeout_from(value: timedelta | float | None) -> timedelta:
    if value is None:
        env = os.environ.get("KILN_DIST_TIMEOUT")
        return timedelta(seconds=float(env)) if env else DEFAULT_TIMEOUT
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return timedelta(seconds=float(value))
    raise TypeError(f"init_process_group(timeout=...) expects a datetime.timedelta or a positive number of "
                    f"seconds, got {value!r}")


def init_process_group(backend: str = "mpi", timeout: timedelta | float | None = None, *,
                       check_collectives: bool | None = None, **kwargs: Any) -> None:
    """Join the world of processes started by ``mpiexec`` (or `kiln.distributed.run`).

    `backend` must be ``"mpi"``. `timeout` bounds every collective (default 30 minutes, or
    ``$KILN_DIST_TIMEOUT`` seconds). In a multi-rank world an uncaught exception on any rank
    prints the rank and aborts every rank, so a failure never leaves the others hanging.
    `check_collectives` (default ``$KILN_DIST_CHECK_COLLECTIVES``, on unless set to 0): each
    collective first checks that every rank passes a tensor of the same shape and dtype (and
    the same op and src), raising CollectiveMismatchError on every rank otherwise; it costs one
    small all-gather per collective. It must be the same on every rank, which this call checks.
    PyTorch's ``init_method``, ``world_size`` and ``rank`` are accepted only if they agree
    with what the launcher set up.

    >>> dist.init_process_group(timeout=600, check_collectives=False)   # tested code, fastest collectives
    """
    global _group
    if backend not in ("mpi", None):
        raise ValueError(f"init_process_group(backend={backend!r}): kiln supports backend='mpi' only; "
                         "launch with `python -m kiln.distributed.run -n N script.py`")
    if _group is not None:
        raise RuntimeError("init_process_group() was already called; call destroy_process_group() first")
    unknown = set(kwargs) - {"init_method", "world_size", "rank", "store", "group_name"}
    if unknown:
        raise TypeError(f"init_process_group() got unexpected keyword arguments {sorted(unknown)}")
    deadline = _timeout_from(timeout)
    checks = checks_from(check_collectives)
    size = launched_world_size()
    if size == 1:
        group = ProcessGroup(rank=0, size=1, comm=None, timeout=deadline, check_collectives=checks)
    else:
        mpi = load_mpi()
        comm = mpi.COMM_WORLD
        group = ProcessGroup(rank=comm.Get_rank(), size=comm.Get_size(), comm=comm if comm.Get_size() > 1 else None,
                             timeout=deadline, check_collectives=checks)
    for key in ("world_size", "rank"):
        want = kwargs.get(key)
        have = getattr(group, "size" if key == "world_size" else "rank")
        if want is not None and want != -1 and want != have:
            raise ValueError(f"init_process_group({key}={want}) but the MPI launcher started this process with "
                             f"{key}={have}; drop the argument (the launcher decides)")
    _group = group
    if group.comm is not None:
        install_abort_on_error(group)
        # No rank leaves init before every rank has armed its abort and told the launcher it
        # runs: a rank that fails at once then stops the others with their state on record.
        # The all-gather that makes this barrier also checks that all ranks check collectives
        # alike (a rank that checks would otherwise wait in a check the others never join).
        problem = checks_disagree(group)
        if problem:
            raise CollectiveMismatchError(problem)


def is_initialized() -> bool:
    """True between `init_process_group` and `destroy_process_group`."""
    return _group is not None


def is_available() -> bool:
    """True: kiln.distributed is always importable (MPI is needed only for more than one rank)."""
    return True


def group() -> ProcessGroup:
    """The current process group, or a RuntimeError that says to initialize it."""
    if _group is None:
        raise RuntimeError("Default process group has not been initialized; call "
                           "kiln.distributed.init_process_group() first")
    return _group


def get_rank() -> int:
    """This process's rank in the world, 0 .. world_size - 1."""
    return group().rank


def get_world_size() -> int:
    """How many processes the world holds."""
    return group().size


def barrier() -> None:
    """Wait until every rank reaches this call (bounded by the group's timeout)."""
    g = group()
    if g.comm is None:
        return
    if g.check_collectives:  # the check's all-gather is a barrier, and catches a rank in another collective
        agree(g, describe("barrier"))
        return
    wait(g.comm.Ibarrier(), "barrier", g)


def destroy_process_group() -> None:
    """Leave the process group; `init_process_group` may be called again afterwards."""
    global _group
    if _group is not None and _group.comm is not None:
        uninstall_abort_on_error()
    _group = None
