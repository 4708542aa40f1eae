"""Run under mpiexec: DDP training on each rank's shard follows single-process full-batch training.

Prints one JSON line on rank 0: {case: max relative loss error over the steps}. Cases cover the
MLP and a tiny GPT, SGD-momentum and AdamW, eager and compiled (DDP(kiln.compile(model))), and
gradient accumulation over 2 micro-batches with no_sync().
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
_last_compiled = None


def build(kind: str, seed: int):
    kiln.manual_seed(seed)
    if kind == "mlp":
        return models.mlp(6, (16, 16), 5, activation="tanh").double()
    return models.gpt(vocab=11, n_layer=1, n_head=2, d_model=8, block_size=4).double()


def data(kind: str, step: int):
    rng = np.random.default_rng(1000 + step % 2)
    if kind == "mlp":
        return kiln.tensor(rng.standard_normal((GLOBAL_BATCH, 6))), kiln.tensor(rng.integers(0, 5, GLOBAL_BATCH))
    idx = rng.integers(0, 11, (GLOBAL_BATCH, 5))
    return kiln.tensor(idx[:, :4]), kiln.tensor(idx[:, 1:])


def loss_of(model, x, y):
    out = model(x)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def make_opt(name: str, params):
    if name == "sgd":
        return optim.SGD(params, lr=0.1, momentum=0.9)
    return optim.AdamW(params, lr=1e-2, weight_decay=0.1)


def reference(kind: str, opt_name: str) -> list[float]:
    model = build(kind, seed=0)
    opt = make_opt(opt_name, model.parameters())
    losses = []
    for step in range(STEPS):
        x, y = data(kind, step)
        opt.zero_grad()
        loss = loss_of(model, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def distributed(kind: str, opt_name: str, compiled: bool, micro: int) -> list[float]:
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build(kind, seed=rank)  # different on every rank: DDP must broadcast rank 0's weights
    global _last_compiled
    if compiled:
        model = _last_compiled = kiln.compile(model)
    ddp = dist.DistributedDataParallel(model, bucket_cap_mb=0.001)
    opt = make_opt(opt_name, ddp.parameters())
    shard = GLOBAL_BATCH // world
    losses = []
    for step in range(STEPS):
        x, y = data(kind, step)
        x, y = x[rank * shard:(rank + 1) * shard], y[rank * shard:(rank + 1) * shard]
        opt.zero_grad()
        total = 0.0
        part = shard // micro
        for m in range(micro):
            xm, ym = x[m * part:(m + 1) * part], y[m * part:(m + 1) * part]
            if m < micro - 1:
                with ddp.no_sync():
                    loss = loss_of(ddp, xm, ym) / micro
                    loss.backward()
            else:
                loss = loss_of(ddp, xm, ym) / micro
                loss.backward()
            total += loss.item()
        opt.step()
        t = kiln.tensor([total], dtype=kiln.float64)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        losses.append(t.item())
    return losses


def main() -> None:
    dist.init_process_group()
    cases = sys.argv[2].split(",") if len(sys.argv) > 2 else [
        f"{k}-{o}-{m}" for k in ("mlp", "gpt") for o in ("sgd", "adamw") for m in ("eager", "compiled")
    ] + ["mlp-sgd-nosync", "gpt-adamw-nosync"]
    errors = {}
    refs: dict[tuple[str, str], list[float]] = {}
    for case in cases:
        kind, opt_name, mode = case.split("-")
        key = (kind, opt_name)
        if key not in refs:
            refs[key] = reference(kind, opt_name)
        got = distributed(kind, opt_name, compiled=mode == "compiled", micro=2 if mode == "nosync" else 1)
        ref = np.array(refs[key])
        errors[case] = float(np.max(np.abs(np.array(got) - ref) / np.abs(ref)))
        if mode == "eager":
            errors[case + "-decreased"] = bool(got[-1] < got[0])
        if mode == "compiled":
            errors[case + "-cache-hits"] = _last_compiled.stats.hits
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(errors), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
