"""Run under mpiexec: DDP's bucket all-reduces are in flight before backward reaches the first
layer, and the gradients still equal the average of every rank's local gradients."""
from __future__ import annotations

import numpy as np

import kiln
import kiln.distributed as dist
from kiln import nn


def model() -> nn.Module:
    kiln.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 3)).double()


def batch(rank: int) -> kiln.Tensor:
    return kiln.tensor(np.random.default_rng(rank).standard_normal((6, 4)))


def main() -> None:
    dist.init_process_group(timeout=30.0)
    rank, world = dist.get_rank(), dist.get_world_size()
    ddp = dist.DistributedDataParallel(model(), bucket_cap_mb=1e-3)
    reducer = ddp.reducer
    in_flight: list[int] = []

    def watch(mod, args, out) -> None:
        out.register_hook(lambda g: in_flight.append(sum(b.request is not None for b in reducer.buckets)))

    ddp.module[0].register_forward_hook(watch)
    ddp(batch(rank)).square().sum().backward()
    later = [b for b in reducer.buckets if all(i >= 2 for i in b.indices)]
    assert later and len(later) < len(reducer.buckets), reducer.bucket_sizes
    assert in_flight == [len(later)], (in_flight, len(later))  # started while backward still ran
    reference = model()
    for r in range(world):
        reference(batch(r)).square().sum().backward()
    for p, q in zip(ddp.module.parameters(), reference.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy() / world, rtol=1e-12)
    dist.barrier()
    if rank == 0:
        print("OVERLAP OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
