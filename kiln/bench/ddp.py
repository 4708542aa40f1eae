"""Workload `ddp`: data-parallel scaling on this machine, and the all-reduce bandwidth.

Trains the MLP 784-256-256-10 (SGD momentum, float32) on a global batch as
1 rank x 2 BLAS threads (the whole batch in one process) and as 2 ranks x 1 thread
(half the batch each, gradients averaged by DistributedDataParallel), plus 1 rank x 1
thread for reference (2 BLAS threads can lose badly on a loaded 2-core machine), all under
``mpiexec`` through `kiln.distributed.run`, and times `all_reduce` of float32 buffers
on 2 ranks. Bus bandwidth is ``2 (n - 1) / n x bytes / time``, as NCCL's tests report it.
Needs the ``[distributed]`` extra.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from .report import Table, write_json

NAME = "ddp"
DESCRIPTION = "DDP scaling (1 rank x 2 threads vs 2 ranks x 1 thread, MLP training step) and all-reduce bandwidth"
WORKER = Path(__file__).with_name("ddp_worker.py")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", type=int, default=256, help="global batch size (default 256)")
    parser.add_argument("--steps", type=int, default=30, help="timed training steps (default 30)")
    parser.add_argument("--compiled", action="store_true", help="wrap kiln.compile(model) instead of the eager model")
    parser.add_argument("--sizes-mb", default="1,16", help="all-reduce sizes in MiB, comma separated (default 1,16)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")


def _launch(nproc: int, threads: int, args: argparse.Namespace, sizes: str) -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, "-m", "kiln.distributed.run", "-n", str(nproc), "--threads", str(threads),
               str(WORKER), str(args.batch), str(args.steps), "compiled" if args.compiled else "eager", sizes]
    proc = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the ddp benchmark run ({nproc} ranks) failed:\n{proc.stdout}")
    return json.loads(lines[0][len("RESULT "):])


def run(args: argparse.Namespace) -> int:
    """Run both configurations and print the scaling table and the all-reduce bandwidth."""
    try:
        import mpi4py  # noqa: F401, PLC0415
    except ImportError:
        print('the ddp workload needs mpi4py: pip install "kiln[distributed]"', file=sys.stderr)
        return 2
    if args.batch % 2:
        print(f"--batch must be even (it is split over 2 ranks), got {args.batch}", file=sys.stderr)
        return 2
    one = _launch(1, 2, args, "")
    single = _launch(1, 1, args, "")
    two = _launch(2, 1, args, args.sizes_mb)
    mode = "compiled" if args.compiled else "eager"
    table = Table(["configuration", "ms / step", "samples / s", "speedup"])
    rows = ((f"1 rank x 2 threads ({mode})", one), (f"2 ranks x 1 thread ({mode})", two),
            (f"1 rank x 1 thread ({mode}, reference)", single))
    for label, res in rows:
        step = res["step_s"]
        table.add_row([label, f"{step * 1e3:.2f}", f"{args.batch / step:.0f}", f"{one['step_s'] / step:.2f}x"])
    print(f"DDP scaling, MLP 784-256-256-10 SGD momentum, global batch {args.batch}, medians of {args.steps} steps")
    print(table.render())
    bw = Table(["all_reduce size", "ms", "bus GB/s"])
    bandwidth = {}
    for mb, seconds in two["allreduce_s"].items():
        nbytes = float(mb) * 1024 * 1024
        gbs = 2 * (2 - 1) / 2 * nbytes / seconds / 1e9
        bandwidth[mb] = gbs
        bw.add_row([f"{float(mb):g} MiB float32", f"{seconds * 1e3:.3f}", f"{gbs:.2f}"])
    print("\nall_reduce on 2 ranks (MPICH, shared memory)")
    print(bw.render())
    if args.json:
        write_json(args.json, {"workload": NAME, "batch": args.batch, "mode": mode, "one_rank_two_threads": one,
                               "two_ranks_one_thread": two,
                               "one_rank_one_thread": single, "speedup": one["step_s"] / two["step_s"],
                               "allreduce_bus_gbs": bandwidth})
    return 0
