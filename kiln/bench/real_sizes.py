"""Workload `real-sizes`: ResNet-18, a GPT and an LSTM LM at the sizes people train, kiln vs torch.

The same model code (kiln/bench/real_size_models.py) runs on both libraries, the torch twin
loaded with the kiln model's weights:

    ResNet-18 (CIFAR) training step, B=32 32x32, SGD lr 0.1 momentum 0.9, cross-entropy
    ResNet-18 inference, B=32, eval mode under no_grad
    GPT, 4 layers, d=384, 6 heads, T=128, B=16, vocab 512 (a small BPE-like vocabulary), AdamW
        lr 3e-4; attention in plain ops (q @ k^T, causal masked_fill, softmax), no dropout
    LSTM LM, vocab 10000, 2x256 nn.LSTM, bptt 35, batch 20, SGD lr 20, clip_grad_norm_ 0.25

Columns (median ms of `--repeat` steps after `--warmup` more): torch eager; torch.compile of the
model (skipped with a note when it fails or torch is missing; with torch's default settings it
leaves nn.LSTM to eager); kiln eager; kiln.compile of the model, loss and optimizer eager; kiln
whole step, ``kiln.compile`` of the whole training step (forward, loss, backward, optimizer: one
plan, as whole_step.py does). Both compiled kiln columns are reported; "kiln best / torch best"
divides the fastest kiln column by the fastest torch column (lower is better), and "compile
speedup" is kiln eager over the faster of kiln.compile and the whole step.

First calls: the first call, and the first three together (kiln's compiled steps reach their
steady speed only after a few calls), of each compiled column, before its warmup. kiln's and
torch's kernel caches point at new temporary folders for the run (KILN_CACHE_DIR,
TORCHINDUCTOR_CACHE_DIR; ``--warm-caches`` keeps the usual ones), so the first workload compiles
cold; a later one may reuse kernels an earlier one compiled. The warm first call of kiln's compiled
columns is the first step of the peak-memory process below: a new process whose kernel cache the
timed run filled.

Peak memory: in a fresh process per library and column, two peaks of RSS above the RSS just
before the first step: over its first 3 steps (4 for the compiled columns, compiling included:
a trace runs the step for real, and holds its arrays until the plan is built), and over 2 steps
after those (the steady step, which a training run repeats). On Linux the high-water mark is
reset before each (/proc/self/clear_refs) and read as VmHWM: ru_maxrss would also count the RSS
of the parent the process was forked from. Elsewhere only the first is measured, as the growth
of ru_maxrss (resource.getrusage). torch's process leaves malloc as glibc sets it (KILN_MALLOC_TUNING=0: it
imports kiln's bench code). kiln's columns are timed in a process without torch (isolate.py).
``--small`` shrinks every model and batch so that a test can run it: its steps take
milliseconds, and compiling them some seconds.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Iterator

from . import isolate
from . import real_size_models as M
from .peers import import_torch
from .report import NOISY_NOTE, Table, fmt, fmt_ratio, fmt_timing, is_noisy, write_json
from .threads import numpy_blas_threads
from .timing import Timing, measure, repeat_calls, settle_compiled_code

NAME = "real-sizes"
DESCRIPTION = "ResNet-18 train/inference, GPT, LSTM LM at real sizes: torch eager/compile vs kiln eager/compile"
KILN_COLUMNS = ("kiln eager", "kiln.compile", "kiln whole step")
TORCH_COLUMNS = ("torch eager", "torch.compile")
COMPILED = ("kiln.compile", "kiln whole step", "torch.compile")  # their first calls are reported
FIRST_CALLS = 3
MEMORY_COLUMNS = ("kiln eager", "kiln.compile", "kiln whole step", "torch eager")
MEMORY_STEPS = {"kiln eager": 3, "kiln.compile": 4, "kiln whole step": 4, "torch eager": 3}
STEADY_STEPS = 2  # after MEMORY_STEPS: the steady step's peak
WARM_FIRST = ("kiln.compile", "kiln whole step")  # their first call in the memory process: a new process, warm caches


def _time_column(lib: ModuleType, setup: M.Setup, column: str, args: argparse.Namespace) -> dict[str, Timing]:
    call = M.make_call(lib, setup, column)
    if call is None:
        return {}
    timings = {}
    if column in COMPILED:
        firsts = []
        for _ in range(FIRST_CALLS):
            start = time.perf_counter()
            call()
            firsts.append(time.perf_counter() - start)
        timings[f"{column} 1st"] = Timing((firsts[0],), 1)
        timings[f"{column} 1st {FIRST_CALLS}"] = Timing((sum(firsts),), 1)
    timings[column] = measure(repeat_calls(call), number=1, repeat=args.repeat, warmup=args.warmup)
    return timings


def _time(workloads: list, sizes: dict, columns: tuple, torch: ModuleType | None,
          args: argparse.Namespace) -> dict[str, dict[str, Timing]]:
    """{workload: {column (and its first calls): Timing}}; a column that fails is printed, not fatal."""
    import kiln  # noqa: PLC0415

    out: dict[str, dict[str, Timing]] = {}
    for workload in workloads:
        out[workload.name] = {}
        weights = M.kiln_weights(workload, sizes) if torch is not None else None
        for column in columns:
            lib = torch if column.startswith("torch") else kiln
            if lib is None:
                continue
            try:
                setup = M.build(lib, workload, sizes, weights if lib is torch else None)
                out[workload.name].update(_time_column(lib, setup, column, args))
            except Exception as exc:  # noqa: BLE001 - a column that cannot run is reported, not fatal
                print(f"note: {workload.name}: {column} failed, skipped: {type(exc).__name__}: {str(exc)[:300]}")
    return out


def measure_peak(lib_name: str, workload_name: str, size: str, column: str, threads: str = "0") -> str:
    """In this (fresh) process: "FIRST STEADY SECONDS", the peak RSS growth in bytes over the first MEMORY_STEPS
    steps of `column` and over the STEADY_STEPS after them, both above the RSS before the first (STEADY
    is -1 where the high-water mark cannot be reset: no /proc), and the seconds its first step took (for a
    compiled column, its first call in a new process with the kernel cache the timed run filled)."""
    import importlib  # noqa: PLC0415
    import resource  # noqa: PLC0415 - POSIX only

    lib = importlib.import_module(lib_name)
    if lib_name == "torch" and int(threads) > 0:
        lib.set_num_threads(int(threads))
    workload = next(w for w in M.WORKLOADS if w.name == workload_name)
    call = M.make_call(lib, M.build(lib, workload, M.SMALL if size == "small" else M.FULL), column)
    if call is None:
        return "-1 -1 -1"
    gc.collect()
    before, maxrss_before = _status_kib("VmRSS"), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peaks, first_call = [], -1.0
    for steps in (MEMORY_STEPS[column], STEADY_STEPS):
        if peaks:  # (the steady steps run the generated code)
            settle_compiled_code()
        with contextlib.suppress(OSError):
            Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark to the current RSS
        for _ in range(steps):
            start = time.perf_counter()
            call()
            first_call = time.perf_counter() - start if first_call < 0 else first_call
        peak = _status_kib("VmHWM")
        if before is None or peak is None:  # no /proc: how much ru_maxrss grew (bytes on macOS, else KiB)
            grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - maxrss_before
            return f"{max(0, grown) * (1 if sys.platform == 'darwin' else 1024)} -1 {first_call}"
        peaks.append(max(0, peak - before) * 1024)
    return f"{peaks[0]} {peaks[1]} {first_call}"


def _status_kib(field: str) -> int | None:
    """A field of /proc/self/status in KiB (VmRSS: resident now; VmHWM: its high-water mark)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def _peaks(workloads: list, size: str, threads: int, torch: bool) -> dict[str, dict[str, tuple[int, int, float]]]:
    """{workload: {column: (peak RSS growth in bytes over the first steps, over the steady steps (-1:
    unknown), seconds of the first step)}}, each measured in a fresh process."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    script = "import sys; from kiln.bench.real_sizes import measure_peak; print(measure_peak(*sys.argv[1:]))"
    out: dict[str, dict[str, tuple[int, int, float]]] = {}
    for workload in workloads:
        out[workload.name] = {}
        for column in MEMORY_COLUMNS:
            if column.startswith("torch") and not torch:
                continue
            lib = "torch" if column.startswith("torch") else "kiln"
            tuning = {"KILN_MALLOC_TUNING": "0"} if lib == "torch" else {}  # importing kiln tunes malloc
            proc = subprocess.run([sys.executable, "-c", script, lib, workload.name, size, column, str(threads)],
                                  capture_output=True, text=True, env={**env, **tuning}, timeout=1800)
            if proc.returncode == 0:
                first, steady, seconds = proc.stdout.strip().splitlines()[-1].split()
                if int(first) >= 0:
                    out[workload.name][column] = (int(first), int(steady), float(seconds))
            else:
                print(f"note: {workload.name}: peak memory of {column} failed: {proc.stderr.strip()[-300:]}")
    return out


@contextlib.contextmanager
def fresh_kernel_caches(keep: bool) -> Iterator[None]:
    """Point kiln's and torch inductor's kernel caches at new temporary folders for the run (unless `keep`)."""
    if keep:
        yield
        return
    names = ("KILN_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")
    saved = {n: os.environ.get(n) for n in names}
    with tempfile.TemporaryDirectory(prefix="kiln-real-sizes-") as tmp:
        for n in names:
            (Path(tmp) / n.lower()).mkdir(mode=0o700)
            os.environ[n] = str(Path(tmp) / n.lower())
        try:
            yield
        finally:
            for n, v in saved.items():
                if v is None:
                    os.environ.pop(n, None)
                else:
                    os.environ[n] = v


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=5, help="timed steps per column (default 5)")
    parser.add_argument("--warmup", type=int, default=1,
                        help=f"untimed steps after the first {FIRST_CALLS} calls of a compiled column (default 1)")
    parser.add_argument("--only", default="", help="run only the workloads whose name contains this text")
    parser.add_argument("--small", action="store_true", help="shrink every model and batch (for tests)")
    parser.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--warm-caches", action="store_true",
                        help="keep the usual kernel caches (faster, but the first calls are then not cold)")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers to PATH as JSON")
    isolate.add_side_argument(parser)
    isolate.add_timings_json_argument(parser)


def _best(timings: dict[str, Timing], columns: tuple) -> float | None:
    found = [timings[c].median for c in columns if c in timings]
    return min(found) if found else None


def _report(workloads: list, sizes: dict, timings: dict, peaks: dict) -> tuple[Table, Table, dict]:
    """The step-time table, the first-call and memory table, and the JSON results."""
    speed = Table(["workload", *[f"{c} ms" for c in TORCH_COLUMNS + KILN_COLUMNS], "kiln best / torch best",
                   "compile speedup"])
    firsts = [f"{c} 1st" for c in COMPILED] + [f"{c} 1st {FIRST_CALLS}" for c in COMPILED]
    other = Table(["workload", *[f"{c} s" for c in firsts], *[f"{c} warm 1st s" for c in WARM_FIRST],
                   *[f"peak MB {c}" for c in MEMORY_COLUMNS],
                   *[f"first-steps peak MB {c}" for c in MEMORY_COLUMNS]])
    results = {}
    for w in workloads:
        t, peak = timings.get(w.name, {}), peaks.get(w.name, {})
        kiln_best, torch_best = _best(t, KILN_COLUMNS), _best(t, TORCH_COLUMNS)
        compiled = _best(t, KILN_COLUMNS[1:])
        ratio = kiln_best / torch_best if kiln_best and torch_best else None
        speedup = t["kiln eager"].median / compiled if compiled and "kiln eager" in t else None
        label = w.label(sizes)
        speed.add_row([label, *[fmt_timing(t.get(c), 1e-3) for c in TORCH_COLUMNS + KILN_COLUMNS], fmt_ratio(ratio),
                       fmt_ratio(speedup)])
        other.add_row([label, *[fmt(t[c].median) if c in t else "-" for c in firsts],
                       *[fmt(peak[c][2]) if c in peak else "-" for c in WARM_FIRST],
                       *[fmt(peak[c][1] / 2**20) if c in peak and peak[c][1] >= 0 else "-" for c in MEMORY_COLUMNS],
                       *[fmt(peak[c][0] / 2**20) if c in peak else "-" for c in MEMORY_COLUMNS]])
        ms = {c: t[c].as_dict(1e-3) for c in TORCH_COLUMNS + KILN_COLUMNS if c in t}
        results[w.name] = {"label": label, "ms": ms,
                           "first_calls_s": {c: t[c].median for c in firsts if c in t},
                           "warm_first_call_s": {c: peak[c][2] for c in WARM_FIRST if c in peak},
                           "kiln_best_over_torch_best": ratio, "kiln_eager_over_compiled": speedup,
                           "peak_rss_growth_bytes": {c: {"first_steps": first, "steady_step": steady}
                                                     for c, (first, steady, _) in peak.items()}}
    return speed, other, results


def run(args: argparse.Namespace) -> int:
    """Time the chosen workloads on both libraries; print the machine and the tables."""
    from . import machine  # noqa: PLC0415

    threads = numpy_blas_threads()
    sizes, size = (M.SMALL, "small") if args.small else (M.FULL, "full")
    chosen = [w for w in M.WORKLOADS if not args.only or args.only.lower() in w.name.lower()]
    if args.side == "kiln":  # the child of an `all` run: kiln's columns only, torch never imported
        isolate.write_kiln_side(args.timings_json, _time(chosen, sizes, KILN_COLUMNS, None, args))
        return 0
    separate = args.side == "all" and not args.same_process
    torch = import_torch(num_threads=threads)  # idle until the kiln side's process is done
    print("\n".join(machine.describe(threads, torch, None)), flush=True)
    print(f"real-sizes ({size}): median of {args.repeat} steps after {args.warmup} warmup steps "
          f"(compiled columns: after their first {FIRST_CALLS} calls too); kiln's columns "
          + ("in a process without torch (isolate.py)" if separate else "in this process"), flush=True)
    if torch is None:
        print("note: torch is not installed: its columns are skipped")
    with fresh_kernel_caches(args.warm_caches):
        argv = ["--repeat", str(args.repeat), "--warmup", str(args.warmup), "--only", args.only]
        timings = {}
        try:
            timings = isolate.kiln_side(NAME, argv + (["--small"] if args.small else [])) if separate else {}
        except RuntimeError as exc:  # e.g. a crash in kiln: the torch columns are still worth having
            print(f"note: kiln's columns failed, skipped: {exc}")
        columns = TORCH_COLUMNS[:1] if args.no_torch_compile else TORCH_COLUMNS
        if not separate and args.side != "peers":
            columns = columns + KILN_COLUMNS
        for name, cols in _time(chosen, sizes, columns, torch, args).items():
            timings.setdefault(name, {}).update(cols)
        peaks = {} if args.no_memory else _peaks(chosen, size, threads, torch is not None)
    speed, other, results = _report(chosen, sizes, timings, peaks)
    print(speed.render())
    if any(is_noisy(v) for t in timings.values() for v in t.values()):
        print(NOISY_NOTE)
    caches = "the usual kernel caches" if args.warm_caches else "kernel caches fresh at the start of the run"
    print(f"first calls of the compiled columns (s, {caches}; warm: the first call in a new process, with the "
          f"kernel cache the run filled); peak RSS growth in MB (each column in a fresh process, above its RSS "
          f"before the first step) over a steady step, and over the first steps (compiling included)")
    print(other.render())
    if args.json:
        write_json(args.json, {"workload": NAME, "size": size, "results": results})
    return 0
