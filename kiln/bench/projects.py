"""Workload `projects`: training steps written as public PyTorch projects write them, run eagerly.

Each program in `project_programs` runs unchanged on kiln and on torch (their APIs match);
the table gives the median eager step time of each and their ratio, then the median and
worst ratio over the programs: how much slower a PyTorch script gets when run on kiln
without compiling it. kiln's column is timed in a process without torch (isolate.py), as a
script written with ``import kiln as torch`` runs.
"""
from __future__ import annotations

import argparse
import statistics

from . import isolate
from .machine import describe
from .peers import import_torch
from .project_programs import PROGRAMS
from .report import Table, fmt_ratio, write_json
from .threads import numpy_blas_threads
from .timing import Timing, measure

NAME = "projects"
DESCRIPTION = "eager training steps of PyTorch-project-style programs (LSTM LM, CNN, VAE, transformer, GCN) vs torch"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=9, help="timed samples per program (default 9)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed warmup samples (default 2)")
    parser.add_argument("--only", help="run only the programs whose name contains this text")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers to PATH as JSON")
    isolate.add_side_argument(parser)
    isolate.add_timings_json_argument(parser)


def _time(programs: list, lib, args: argparse.Namespace) -> dict[str, Timing]:
    # number=None: each sample runs enough steps back to back to last MIN_SAMPLE_S, as a
    # training loop runs them (a lone millisecond step after a collection measures cold caches)
    return {p.name: measure(p.build(lib), number=None, repeat=args.repeat, warmup=args.warmup) for p in programs}


def run(args: argparse.Namespace) -> int:
    """Time every program on kiln and torch (when installed); print the table."""
    import kiln  # noqa: PLC0415

    threads = numpy_blas_threads()
    programs = [p for p in PROGRAMS if not args.only or args.only.lower() in p.name.lower()]
    if args.side == "kiln":  # the child of an `all` run: kiln's column only, torch never imported
        isolate.write_kiln_side(args.timings_json, {p: {"kiln": t} for p, t in _time(programs, kiln, args).items()})
        return 0
    separate = args.side == "all" and not args.same_process
    torch = import_torch(threads)  # idle until the kiln side's process is done
    kiln_times = {}
    if separate:
        only = ["--only", args.only] if args.only else []
        argv = ["--repeat", str(args.repeat), "--warmup", str(args.warmup), *only]
        try:
            kiln_times = {p: t["kiln"] for p, t in isolate.kiln_side(NAME, argv).items()}
        except RuntimeError as exc:  # e.g. a crash in kiln: torch's column is still worth having
            print(f"note: kiln's column failed, skipped: {exc}")
    elif args.side != "peers":
        kiln_times = _time(programs, kiln, args)
    torch_times = _time(programs, torch, args) if torch is not None else {}
    table = Table(["program", "like", "kiln eager", "torch eager", "kiln / torch"])
    ratios, rows = [], []
    for program in programs:
        k = kiln_times[program.name].median if program.name in kiln_times else None
        t = torch_times[program.name].median if program.name in torch_times else None
        ratio = k / t if k and t else None
        if ratio is not None:
            ratios.append(ratio)
        table.add_row([program.name, program.like, f"{k * 1e3:.1f} ms" if k else "-", f"{t * 1e3:.1f} ms" if t else "-",
                       fmt_ratio(ratio) if ratio else "-"])
        rows.append({"program": program.name, "kiln_ms": k * 1e3 if k else None, "torch_ms": t * 1e3 if t else None})
    print("\n".join(describe(threads, torch, None)))
    print("kiln's column " + ("in a process without torch (isolate.py)" if separate else "in this process"))
    print(table.render())
    if ratios:
        print(f"median kiln/torch {statistics.median(ratios):.2f}x, worst {max(ratios):.2f}x")
    if args.json:
        write_json(args.json, {"workload": NAME, "rows": rows})
    return 0
