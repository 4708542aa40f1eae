"""``python -m kiln.gpu_check OUT``: the prepared GPU check (see kiln/gpu_check/__init__.py)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from .probe import probe
from .report import TestRun, read_junit, render
from .workloads import PROFILES, run_all

NO_GPU_STATUS = 3


def main(argv: list[str] | None = None) -> int:
    """Run the check; 0 when every test passed (none skipped), 1 otherwise, 3 without a GPU."""
    parser = argparse.ArgumentParser(prog="python -m kiln.gpu_check", description=__doc__)
    parser.add_argument("out", type=Path, help="folder for report.md and the raw logs (created)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: rehearse the workloads at tiny sizes on the CPU (no tests, no GPU needed)")
    parser.add_argument("--no-tests", action="store_true", help="skip the CUDA tests")
    parser.add_argument("--no-workloads", action="store_true", help="skip the timed workloads")
    parser.add_argument("--test-timeout", type=int, default=240, help="seconds for the tests (default 240)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    machine = probe()
    if args.device == "cuda" and machine.no_gpu:
        print(f"gpu_check: no GPU: {machine.no_gpu}; nothing to check (report in {args.out / 'report.md'})")
        _write(args.out, render(machine, args.device, None, None, time.perf_counter() - start))
        return NO_GPU_STATUS
    tests = None
    if args.device == "cuda" and not args.no_tests:
        tests = _run_tests(args.out, args.test_timeout)
        print(f"gpu_check: tests {tests.counts or tests.status}", flush=True)
    results = None
    if not args.no_workloads:
        log: list[str] = []
        results = run_all(args.device, small=args.device == "cpu", log=log)
        (args.out / "workloads.log").write_text("\n".join(log) or "no errors\n")
        (args.out / "workloads.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
        if PROFILES:
            (args.out / "profile.log").write_text("\n\n".join(PROFILES) + "\n")
    report = render(machine, args.device, tests, results, time.perf_counter() - start)
    _write(args.out, report)
    print(report)
    clean = tests is None or (tests.counts and not tests.failed and not tests.skipped)
    return 0 if clean else 1


def _run_tests(out: Path, timeout: int) -> TestRun:
    """pytest on the checkout's CUDA tests in one process (no pytest-xdist on the GPU machine)."""
    root = Path(__file__).resolve().parents[2]
    folders = [str(root / "tests" / name) for name in ("cuda", "devices") if (root / "tests" / name).is_dir()]
    if not folders:
        return TestRun(f"no tests/cuda or tests/devices under {root} (run from a checkout)")
    junit = out / "junit.xml"
    command = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-rs", "-p", "no:cacheprovider",
               f"--junitxml={junit}", *folders]
    with open(out / "pytest.log", "w") as log:
        try:
            done = subprocess.run(command, cwd=root, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False)
            status = f"ran, pytest exit status {done.returncode}"
        except subprocess.TimeoutExpired:
            status = f"stopped after {timeout} s (--test-timeout)"
    run = read_junit(junit, status)
    run.status = status
    return run


def _write(out: Path, report: str) -> None:
    (out / "report.md").write_text(report + "\n")


if __name__ == "__main__":
    sys.exit(main())
