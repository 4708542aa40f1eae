"""Workload `targets` (also ``python -m kiln.bench --peers``): kiln.compile against its targets.

One run times each workload in every library present, side by side: kiln eager,
kiln.compile, PyTorch eager, torch.compile and jax.jit (missing ones are skipped), and
checks the code generator's targets, each a ratio of kiln.compile's median to a peer's:

    LayerNorm+tanh-GELU 4096x1024, inference   <= 1.0x jax.jit, <= 3x a memcpy of the input
    softmax 4096x1024, last dim                 <= 1.0x jax.jit, <= 1.0x kiln eager
    exact (erf) GELU 4096x1024                  <= 1.0x jax.jit, <= 1.0x kiln eager
    cross-entropy 4096x1024, loss and gradient  <= 1.0x jax.jit, <= 1.0x kiln eager
    MLP 784-256-256-10 inference, batch 1       <= 0.5x jax.jit
    MLP training step, batch 128                <= 0.8x torch eager
    2 pre-norm transformer blocks, fwd+bwd      <= 0.9x torch eager
    kiln.models.gpt training step               <= 1.0x torch eager
    LeNet-5 training step, batch 64             <= 1.0x torch eager
    first MLP training step, cold cache         <= 1.0 s
    first MLP training step, warm cache         <= 50 ms (a new process)
    peak memory of compiled training            <= eager's

Training steps compile the model and keep the loss and optimizer eager. Run it with
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (they slow NumPy's BLAS); the machine
line says when they are set. Times are medians; "*" marks a noisy one. ``--cases softmax,GELU``
runs only the cases whose name holds one of the substrings.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable, Sequence

from . import first_call, isolate, op_cases, target_cases
from .peers import import_torch
from .report import NOISY_NOTE, Table, fmt, fmt_timing, is_noisy, write_json
from .target_cases import Peers
from .threads import numpy_blas_threads
from .timing import Loop, Timing, measure

NAME = "targets"
DESCRIPTION = "kiln.compile against its speed targets, beside torch eager, torch.compile and jax.jit"
COLUMNS = ["kiln eager", "kiln.compile", "torch eager", "torch.compile", "jax.jit", "memcpy"]
KILN_COLUMNS = ("kiln eager", "kiln.compile", "memcpy")  # timed in a process without torch or jax (isolate.py)


@dataclass(frozen=True)
class Target:
    """kiln.compile's median may be at most `limit` times `peer`'s."""

    peer: str
    limit: float

    def text(self) -> str:
        return f"<= {self.limit:g}x {self.peer}"


@dataclass(frozen=True)
class Case:
    name: str
    unit: str  # "ms" or "us"
    build: Callable[[Peers], dict[str, Loop]]
    targets: tuple[Target, ...]
    number: int | None = None  # calls per timed sample (None: enough for MIN_SAMPLE_S, see timing.py)


_NEVER_SLOWER = (Target("jax.jit", 1.0), Target("kiln eager", 1.0))  # than jax.jit, and than kiln eager
CASES = [
    Case("LayerNorm+GELU 4096x1024", "ms", target_cases.layer_norm_gelu,
         (Target("jax.jit", 1.0), Target("memcpy", 3.0))),
    Case("softmax 4096x1024", "ms", op_cases.softmax, _NEVER_SLOWER),
    Case("GELU (erf) 4096x1024", "ms", op_cases.gelu, _NEVER_SLOWER),
    Case("cross-entropy fwd+bwd 4096x1024", "ms", op_cases.cross_entropy_fwd_bwd, _NEVER_SLOWER),
    Case("MLP inference B=1", "us", target_cases.mlp_inference_b1, (Target("jax.jit", 0.5),)),
    Case("MLP train step B=128", "ms", target_cases.model_train_step("mlp"), (Target("torch eager", 0.8),)),
    Case("2 transformer blocks fwd+bwd", "ms", target_cases.transformer_blocks, (Target("torch eager", 0.9),)),
    Case("gpt train step", "ms", target_cases.model_train_step("gpt"), (Target("torch eager", 1.0),)),
    Case("LeNet-5 train step B=64", "ms", target_cases.model_train_step("lenet5"), (Target("torch eager", 1.0),)),
]
_SCALE = {"ms": 1e-3, "us": 1e-6}


def _import_jax():
    try:
        import jax  # noqa: PLC0415
    except Exception:  # noqa: BLE001 - a broken install is as good as none
        return None
    return jax


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=15, help="timed samples per case (default 15)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed warmup samples (default 3)")
    parser.add_argument("--cases", default="", help="comma-separated substrings: only cases whose name has one")
    parser.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile (slow to build)")
    parser.add_argument("--no-process", action="store_true",
                        help="skip the first-call and peak-memory measurements (fresh processes)")
    parser.add_argument("--json", metavar="PATH", help="write the numbers as JSON")
    isolate.add_side_argument(parser)
    isolate.add_timings_json_argument(parser)


def _verdict(ratio: float | None, limit: float) -> str:
    if ratio is None:
        return "-"
    return "met" if ratio <= limit else "MISSED"


def _time(case: Case, peers: Peers, columns: Sequence[str], args: argparse.Namespace) -> dict[str, Timing]:
    """The case's `columns` that its builder gives for `peers`, timed."""
    loops = case.build(peers)
    timings = {}
    for column in columns:
        if column in loops:
            try:
                timings[column] = measure(loops[column], number=case.number, repeat=args.repeat,
                                          warmup=args.warmup)
            except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
                print(f"{case.name}: {column} failed: {type(exc).__name__}: {exc}")
    return timings


def run(args: argparse.Namespace) -> int:
    from . import machine  # noqa: PLC0415

    threads = numpy_blas_threads()
    wanted = [c for c in CASES if not args.cases or any(s.strip() and s.strip() in c.name
                                                            for s in args.cases.split(","))]
    if args.side == "kiln":  # the child of an `all` run: kiln's columns only, no torch or jax imported
        kiln_only = Peers(torch=None, jax=None, torch_compile=False)
        isolate.write_kiln_side(args.timings_json, {c.name: _time(c, kiln_only, KILN_COLUMNS, args) for c in wanted})
        return 0
    separate = args.side == "all" and not args.same_process
    kiln_timings = isolate.kiln_side(NAME, ["--repeat", str(args.repeat), "--warmup", str(args.warmup),
                                            "--cases", args.cases]) if separate else {}
    torch = import_torch(num_threads=threads)
    jax = _import_jax()
    peers = Peers(torch=torch, jax=jax, torch_compile=torch is not None and not args.no_torch_compile)
    here = [c for c in COLUMNS if c not in KILN_COLUMNS] if args.side == "peers" or separate else COLUMNS
    table = Table(["case", "unit", *COLUMNS, "target", "ratio", "verdict"])
    results: dict[str, dict] = {}
    noisy = False
    for case in wanted:
        timings = {**kiln_timings.get(case.name, {}), **_time(case, peers, here, args)}
        noisy |= any(is_noisy(t) for t in timings.values())
        scale = _SCALE[case.unit]
        results[case.name] = {c: t.as_dict(scale) for c, t in timings.items()}
        cells = [fmt_timing(timings.get(c), scale) for c in COLUMNS]
        for i, target in enumerate(case.targets):
            mine, peer = timings.get("kiln.compile"), timings.get(target.peer)
            ratio = mine.median / peer.median if mine and peer else None
            results[case.name][f"ratio vs {target.peer}"] = ratio
            table.add_row([case.name if i == 0 else "", case.unit if i == 0 else "",
                           *(cells if i == 0 else [""] * len(COLUMNS)), target.text(),
                           "-" if ratio is None else f"{ratio:.2f}x", _verdict(ratio, target.limit)])
    if not args.no_process:
        cold, warm = first_call.first_call_seconds()
        eager_peak, compiled_peak = first_call.peak_training_bytes()
        results["first call"] = {"cold_s": cold, "warm_s": warm}
        results["peak memory"] = {"eager_bytes": eager_peak, "compiled_bytes": compiled_peak}
        blank = [""] * (len(COLUMNS) - 2)
        table.add_row(["first MLP train step, cold", "ms", "", fmt(cold * 1e3), *blank, "<= 1000 ms", "",
                       _verdict(cold, 1.0)])
        table.add_row(["first MLP train step, warm", "ms", "", fmt(warm * 1e3), *blank, "<= 50 ms", "",
                       _verdict(warm, 0.05)])
        ratio = compiled_peak / eager_peak if eager_peak else None
        table.add_row(["peak memory, MLP training", "MB", fmt(eager_peak / 2**20), fmt(compiled_peak / 2**20),
                       *blank, "<= 1x kiln eager", "-" if ratio is None else f"{ratio:.2f}x",
                       _verdict(ratio, 1.0)])
    for line in machine.describe(threads, torch, jax):
        print(line)
    print(f"targets: median of {args.repeat} samples after {args.warmup} warmup samples; ratio = kiln.compile / "
          "the target's column (lower is better)")
    if separate:
        print("kiln's columns (and memcpy) timed in a separate process without torch or jax, as a kiln user's "
              "process runs (see kiln/bench/isolate.py); --same-process times them here")
    print(table.render())
    if noisy:
        print(NOISY_NOTE)
    if args.json:
        write_json(args.json, {"workload": NAME, "results": results})
    return 0
