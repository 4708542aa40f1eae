"""Run under mpiexec with 2 ranks: collectives whose tensors differ across ranks raise on every rank.

Arguments: a mode and a folder, where each rank writes ``rank<r>.json``: {case: outcome}, the
outcome being ``"<ExceptionType>: <message>"`` or ``"ok <result>"``. `check` tries each kind of
mismatch, then shows that matching collectives right after still give the right answer. `on`,
`off-env` (through $KILN_DIST_CHECK_COLLECTIVES) and `off-kwarg` (through init_process_group)
count the all-gathers the collectives issue. `disagree` turns the check off on rank 1 only.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

import numpy as np

import kiln
import kiln.distributed as dist
from kiln.distributed.process_group import group


RESULTS: dict[str, str] = {}


def report(name: str, run: Callable[[], Any]) -> None:
    try:
        got = run()
    except Exception as exc:  # noqa: BLE001 - each rank reports what it raised
        RESULTS[name] = f"{type(exc).__name__}: {exc}"
    else:
        RESULTS[name] = f"ok {got}"


def reduced(t: kiln.Tensor, **kw: Any) -> list:
    dist.all_reduce(t, **kw)
    return t.numpy().tolist()


def check(rank: int) -> None:
    one = rank == 1
    report("size", lambda: reduced(kiln.ones(5 if one else 3)))
    report("dtype", lambda: reduced(kiln.ones(3, dtype=kiln.float64 if one else kiln.float32)))
    report("op", lambda: reduced(kiln.ones(3), op=dist.ReduceOp.MAX if one else dist.ReduceOp.SUM))
    report("async", lambda: dist.all_reduce(kiln.ones(2, 2 if one else 3), async_op=True).wait())
    report("broadcast", lambda: dist.broadcast(kiln.ones(4 if one else 3)))
    report("broadcast-src", lambda: dist.broadcast(kiln.ones(3), src=rank))
    report("all_gather", lambda: dist.all_gather([kiln.ones(2, 3 + rank) for _ in range(2)],
                                                       kiln.ones(2, 3 + rank)))
    out = kiln.zeros(3, dtype=kiln.int64 if one else kiln.int32)
    report("reduce_scatter", lambda: dist.reduce_scatter(out, [kiln.ones_like(out) for _ in range(2)]))
    report("other-call", lambda: dist.barrier() if one else reduced(kiln.ones(3)))
    report("matching", lambda: reduced(kiln.tensor(np.arange(3.0) * (rank + 1))))
    report("matching-gather", lambda: gathered(rank))


def gathered(rank: int) -> list:
    outs = [kiln.zeros(2) for _ in range(2)]
    dist.all_gather(outs, kiln.full((2,), float(rank)))
    return [o.numpy().tolist() for o in outs]


class CountingComm:
    """The MPI communicator, counting the all-gathers issued through it."""

    def __init__(self, comm: Any):
        self.comm = comm
        self.allgathers = 0

    def Iallgather(self, *args: Any) -> Any:  # noqa: N802 - mpi4py's name
        self.allgathers += 1
        return self.comm.Iallgather(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.comm, name)


def count(rank: int, how: str) -> None:
    g = group()
    counting = g.comm = CountingComm(g.comm)
    t = kiln.tensor(np.arange(3.0) * (rank + 1))
    dist.all_reduce(t)
    dist.broadcast(kiln.ones(2), src=1)
    dist.all_gather([kiln.zeros(2) for _ in range(2)], kiln.ones(2))
    dist.reduce_scatter(kiln.zeros(2), [kiln.ones(2) for _ in range(2)])
    dist.barrier()
    RESULTS[how] = f"checks={g.check_collectives} allgathers={counting.allgathers} sum={t.numpy().tolist()}"


def main() -> None:
    mode, folder = sys.argv[1], sys.argv[2]
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    if mode == "off-env" or (mode == "disagree" and rank == 1):
        os.environ["KILN_DIST_CHECK_COLLECTIVES"] = "0"
    if mode == "disagree":
        report("init", lambda: dist.init_process_group(timeout=20))
    else:
        dist.init_process_group(timeout=20, check_collectives=False if mode == "off-kwarg" else None)
        assert rank == dist.get_rank()
        if mode == "check":
            check(rank)
        else:
            count(rank, mode)
        dist.destroy_process_group()
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
        json.dump(RESULTS, f)


if __name__ == "__main__":
    main()
