"""One rank of the `ddp` workload (started by mpiexec): times DDP MLP training steps and all-reduces.

Prints one JSON line on rank 0: median seconds per step and per all-reduce size.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np


def main() -> None:
    import kiln  # noqa: PLC0415
    import kiln.distributed as dist  # noqa: PLC0415

    global_batch, steps, compiled = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "compiled"
    sizes_mb = [float(s) for s in sys.argv[4].split(",")] if len(sys.argv) > 4 and sys.argv[4] else []
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    kiln.manual_seed(0)
    model = kiln.models.mlp(784, (256, 256), 10)
    ddp = dist.DistributedDataParallel(kiln.compile(model) if compiled else model)
    opt = kiln.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    shard = global_batch // world
    rng = np.random.default_rng(rank)
    x = kiln.tensor(rng.standard_normal((shard, 784)).astype(np.float32))
    y = kiln.tensor(rng.integers(0, 10, shard))

    def step() -> None:
        opt.zero_grad()
        kiln.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    for _ in range(5):
        step()
    kiln.jit.wait_for_builds()  # (the timed steps run the generated code)
    times = []
    for _ in range(steps):
        dist.barrier()
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    result = {"step_s": statistics.median(times), "allreduce_s": {}}
    for mb in sizes_mb:
        t = kiln.zeros(int(mb * 1024 * 1024 / 4))
        samples = []
        for _ in range(7):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            samples.append(time.perf_counter() - start)
        result["allreduce_s"][str(mb)] = statistics.median(samples[1:])
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
