"""Run under mpiexec: `raise` makes rank 1 raise; `timeout` makes rank 1 skip a collective;
`mismatch` gives rank 1 a different model."""
from __future__ import annotations

import sys
import time

import kiln
import kiln.distributed as dist
from kiln import nn


def main() -> None:
    mode = sys.argv[1]
    dist.init_process_group(timeout=2.0)
    rank = dist.get_rank()
    if mode == "raise":
        if rank == 1:
            raise ValueError("rank one fails on purpose")
        dist.all_reduce(kiln.ones(3))
    elif mode == "timeout":
        if rank == 1:
            time.sleep(60)
        dist.all_reduce(kiln.ones(3))
    elif mode == "mismatch":
        width = 8 if rank == 0 else 9
        dist.DistributedDataParallel(nn.Sequential(nn.Linear(4, width), nn.Linear(width, 2)))
    print(f"rank {rank} reached the end", flush=True)


if __name__ == "__main__":
    main()
