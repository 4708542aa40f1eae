"""Run under mpiexec: DDP inside a whole compiled training step (kiln.compile(train_step)).

Prints one JSON line on rank 0 with: the max relative loss error against single-process
full-batch training (MLP, SGD-momentum, float64, 20 steps) for a whole compiled step and for
compiled micro-steps accumulated under no_sync(); the compiled steps' stats; and whether a
plan traced with syncing skips its collective under no_sync() (rank 0 alone replays it).
"""
from __future__ import annotations

import json
import sys

import numpy as np

import kiln
import kiln.distributed as dist
import kiln.functional as F
from kiln import models, optim

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
GLOBAL_BATCH = 8


def build(seed: int):
    kiln.manual_seed(seed)
    return models.mlp(6, (16, 16), 5, activation="tanh").double()


def data(step: int):
    rng = np.random.default_rng(1000 + step % 2)
    return kiln.tensor(rng.standard_normal((GLOBAL_BATCH, 6))), kiln.tensor(rng.integers(0, 5, GLOBAL_BATCH))


def reference() -> list[float]:
    model = build(0)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(STEPS):
        x, y = data(step)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def shard(t, rank, world):
    n = GLOBAL_BATCH // world
    return t[rank * n:(rank + 1) * n]


def whole_step() -> tuple[list[float], dict]:
    rank, world = dist.get_rank(), dist.get_world_size()
    ddp = dist.DistributedDataParallel(build(seed=rank), bucket_cap_mb=0.001)
    opt = optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)

    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        return loss

    step = kiln.compile(train_step)
    losses = []
    for i in range(STEPS):
        x, y = data(i)
        loss = step(shard(x, rank, world), shard(y, rank, world))
        t = kiln.tensor([loss.item()], dtype=kiln.float64)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        losses.append(t.item())
    s = step.stats
    return losses, {"traces": s.traces, "hits": s.hits, "fallbacks": s.fallbacks}


def accumulated() -> tuple[list[float], dict, dict]:
    rank, world = dist.get_rank(), dist.get_world_size()
    ddp = dist.DistributedDataParallel(build(seed=rank), bucket_cap_mb=0.001)
    opt = optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)

    def micro_step(x, y):
        loss = F.cross_entropy(ddp(x), y) / 2
        loss.backward()
        return loss

    micro = kiln.compile(micro_step)
    losses = []
    for i in range(STEPS):
        x, y = data(i)
        x, y = shard(x, rank, world), shard(y, rank, world)
        half = len(y) // 2
        opt.zero_grad()
        with ddp.no_sync():
            first = micro(x[:half], y[:half])
        second = micro(x[half:], y[half:])  # the same plan as a synced step: reads the sync flag per call
        opt.step()
        t = kiln.tensor([first.item() + second.item()], dtype=kiln.float64)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        losses.append(t.item())
    s = micro.stats
    stats = {"traces": s.traces, "hits": s.hits, "fallbacks": s.fallbacks}

    # rank 0 alone replays both plans under no_sync(): a baked-in collective would wait for rank 1
    # until the timeout; without one, its grads are its own (un-averaged) sums
    skipped = {}
    if rank == 0:
        x, y = data(0)
        x, y = shard(x, rank, world), shard(y, rank, world)
        opt.zero_grad()
        with ddp.no_sync():
            micro(x[:2], y[:2])
            micro(x[2:4], y[2:4])
        plain = build(0)
        plain.load_state_dict(ddp.module.state_dict())
        (F.cross_entropy(plain(x[:2]), y[:2]) / 2).backward()
        (F.cross_entropy(plain(x[2:4]), y[2:4]) / 2).backward()
        skipped["no_sync-grad-error"] = max(float(np.max(np.abs(p.grad.numpy() - q.grad.numpy())))
                                            for p, q in zip(ddp.module.parameters(), plain.parameters()))
        skipped["no_sync-traces"] = micro.stats.traces
    dist.barrier()
    return losses, stats, skipped


def main() -> None:
    dist.init_process_group(timeout=10)
    ref = np.array(reference())
    got, stats = whole_step()
    acc, acc_stats, skipped = accumulated()
    result = {
        "whole-error": float(np.max(np.abs(np.array(got) - ref) / np.abs(ref))),
        "whole-decreased": bool(got[-1] < got[0]),
        "whole-stats": stats,
        "nosync-error": float(np.max(np.abs(np.array(acc) - ref) / np.abs(ref))),
        "nosync-stats": acc_stats,
        **skipped,
    }
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
