"""Run under mpiexec: every collective against NumPy on the values all ranks can compute."""
from __future__ import annotations

import numpy as np

import kiln
import kiln.distributed as dist


def values(rank: int) -> np.ndarray:
    return np.arange(6, dtype=np.float64).reshape(2, 3) * (rank + 1) - rank


def check(name: str, got: np.ndarray, want: np.ndarray) -> None:
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-12, atol=0):
        raise AssertionError(f"{name}: got {got!r}, want {want!r}")


def main() -> None:
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    everyone = np.stack([values(r) for r in range(world)])
    for op, want in ((dist.ReduceOp.SUM, everyone.sum(0)), (dist.ReduceOp.AVG, everyone.mean(0)),
                     (dist.ReduceOp.MAX, everyone.max(0)), (dist.ReduceOp.MIN, everyone.min(0)),
                     (dist.ReduceOp.PRODUCT, everyone.prod(0))):
        t = kiln.tensor(values(rank))
        version = t._version
        dist.all_reduce(t, op=op)
        check(f"all_reduce {op}", t.numpy(), want)
        assert t._version > version, "all_reduce must bump the version counter (it writes in place)"
    ints = kiln.tensor(np.array([rank, 10 * rank], dtype=np.int64))
    dist.all_reduce(ints)
    check("all_reduce int64", ints.numpy(), np.array([sum(range(world)), 10 * sum(range(world))]))
    base = kiln.tensor(values(rank).T.copy())
    strided = base.t()  # not C-contiguous: reduced through a copy and written back
    dist.all_reduce(strided)
    check("all_reduce non-contiguous", base.numpy(), everyone.sum(0).T)
    work = dist.all_reduce(t := kiln.tensor(values(rank)), async_op=True)
    work.wait()
    check("all_reduce async", t.numpy(), everyone.sum(0))
    for src in range(world):
        t = kiln.tensor(values(rank))
        dist.broadcast(t, src=src)
        check(f"broadcast src={src}", t.numpy(), values(src))
    outs = [kiln.zeros(2, 3, dtype=kiln.float64) for _ in range(world)]
    dist.all_gather(outs, kiln.tensor(values(rank)))
    for r, o in enumerate(outs):
        check(f"all_gather [{r}]", o.numpy(), values(r))
    out = kiln.zeros(2, 3, dtype=kiln.float64)
    dist.reduce_scatter(out, [kiln.tensor(values(rank) + 100 * i) for i in range(world)])
    check("reduce_scatter", out.numpy(), (everyone + 100 * rank).sum(0))
    dist.barrier()
    if rank == 0:
        print("COLLECTIVES OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
