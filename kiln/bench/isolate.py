"""Time kiln's columns in a process of their own, where neither PyTorch nor JAX is loaded.

A kiln user's process does not import torch or jax, and in one shared with them kiln does not
run as it would on its own: PyTorch brings its own OpenMP runtime, whose idle threads spin, so
kiln keeps its generated kernels on one thread there (kiln/jit/backends/cpu/parallel.py), and
both libraries' thread pools compete for the same cores. So a workload that compares kiln with
its peers runs as two processes: this one times the peers, and a child (``--side kiln``) times
kiln's columns and hands their samples back as JSON. Each side builds the same inputs from the
same seeds; the peers' side still builds kiln's models (their weights seed the peers' twins) but
does not time them.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from .timing import Timing

SIDES = ("all", "kiln", "peers")


def add_side_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--side", choices=SIDES, default="all",
                        help="all (default): kiln's columns in a child process without torch/jax, the peers "
                             "here; kiln / peers: time only that side (kiln writes its samples for the parent)")
    parser.add_argument("--same-process", action="store_true",
                        help="time kiln's columns in this process too, beside torch and jax")


def timings_to_json(timings: dict[str, dict[str, Timing]]) -> dict:
    """{case: {column: Timing}} as plain JSON."""
    return {case: {col: {"samples": list(t.samples), "number": t.number} for col, t in cols.items()}
            for case, cols in timings.items()}


def timings_from_json(data: dict) -> dict[str, dict[str, Timing]]:
    return {case: {col: Timing(tuple(t["samples"]), int(t["number"])) for col, t in cols.items()}
            for case, cols in data.items()}


def kiln_side(workload: str, argv: list[str]) -> dict[str, dict[str, Timing]]:
    """Run ``python -m kiln.bench WORKLOAD ARGV --side kiln`` and return its timings.

    Raises RuntimeError naming the exit status and the child's last output when it fails."""
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as tmp:
        out = Path(tmp) / "kiln.json"
        command = [sys.executable, "-m", "kiln.bench", workload, *argv, "--side", "kiln", "--timings-json", str(out)]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stdout + proc.stderr)[-2000:]
            raise RuntimeError(f"the kiln side of `{workload}` failed (exit {proc.returncode}); its output ends:\n"
                               f"{tail}")
        for line in proc.stdout.splitlines():  # what the child says (skipped cases, failures)
            print(line)
        return timings_from_json(json.loads(out.read_text()))


def write_kiln_side(path: str, timings: dict[str, dict[str, Timing]]) -> None:
    Path(path).write_text(json.dumps(timings_to_json(timings)))


def add_timings_json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timings-json", metavar="PATH", help=argparse.SUPPRESS)  # the kiln side's samples
