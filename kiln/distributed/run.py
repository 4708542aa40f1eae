"""Launcher: ``python -m kiln.distributed.run -n 4 [--hostfile hosts] train.py [args]``.

It wraps ``mpiexec`` (MPICH's, from the ``mpich`` pip wheel, or any on PATH): starts `n` ranks of
``python train.py args``, gives each rank ``cpus // n`` BLAS/OpenMP threads unless the environment
already says, and, when the job fails, prints one line per rank saying which rank failed and how.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Sequence

from .faults import STATUS_DIR_VARIABLE
from .mpi import EXTRA_HINT

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def find_mpiexec() -> str | None:
    """The mpiexec next to this Python (a pip-installed MPICH), else the first on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return shutil.which("mpiexec")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kiln.distributed.run",
        description="Run a kiln training script on several processes (and machines) through mpiexec.")
    parser.add_argument("-n", "--nproc", type=int, required=True, metavar="N", help="number of ranks to start")
    parser.add_argument("--hostfile", metavar="FILE",
                        help="machines to spread the ranks over (MPICH format: one 'host[:slots]' per line)")
    parser.add_argument("--threads", type=int, metavar="T",
                        help="BLAS/OpenMP threads per rank (default: CPU count // N on one machine, at least 1)")
    parser.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="timeout of every collective (sets KILN_DIST_TIMEOUT; default 1800)")
    parser.add_argument("--mpiexec", metavar="PATH", help="the mpiexec to use (default: found automatically)")
    parser.add_argument("script", help="the Python script every rank runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    return parser


def mpiexec_command(mpiexec: str, nproc: int, script: str, args: Sequence[str], hostfile: str | None) -> list[str]:
    """The mpiexec command line that starts `nproc` ranks of ``python script args``."""
    command = [mpiexec, "-n", str(nproc)]
    if hostfile:
        command += ["-f", hostfile]
    return command + [sys.executable, script, *args]


def rank_report(status_dir: str, nproc: int) -> list[str]:
    """One line per rank: what it reported before the job ended."""
    lines = []
    failed = []
    for rank in range(nproc):
        try:
            with open(os.path.join(status_dir, f"rank{rank}"), encoding="utf-8") as f:
                status = f.read().strip()
        except OSError:
            status = ""
        if status.startswith("failed"):
            failed.append(rank)
        lines.append((rank, status))
    out = []
    for rank, status in lines:
        if status.startswith("failed"):
            text = status
        elif status == "ok":
            text = "finished"
        elif status == "running":
            culprit = f"rank {failed[0]} failed" if failed else "the job failed"
            text = f"stopped: aborted because {culprit}"
        elif failed:
            text = (f"stopped: aborted because rank {failed[0]} failed, before this rank reached "
                    "init_process_group (or it ran on another machine)")
        else:
            text = "no report (it did not call init_process_group, or ran on another machine)"
        out.append(f"kiln.distributed.run: rank {rank}: {text}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, run mpiexec, and return its exit code."""
    opts = build_parser().parse_args(argv)
    if opts.nproc < 1:
        print(f"kiln.distributed.run: -n must be at least 1, got {opts.nproc}", file=sys.stderr)
        return 2
    if opts.hostfile and not os.path.isfile(opts.hostfile):
        print(f"kiln.distributed.run: hostfile {opts.hostfile!r} does not exist", file=sys.stderr)
        return 2
    if not os.path.isfile(opts.script):
        print(f"kiln.distributed.run: script {opts.script!r} does not exist", file=sys.stderr)
        return 2
    mpiexec = opts.mpiexec or find_mpiexec()
    if mpiexec is None:
        print(f"kiln.distributed.run: mpiexec was not found. Fix: {EXTRA_HINT}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    threads = opts.threads or (1 if opts.hostfile else max(1, (os.cpu_count() or 1) // opts.nproc))
    for name in _THREAD_VARIABLES:
        if opts.threads or name not in env:
            env[name] = str(threads)
    if opts.timeout is not None:
        env["KILN_DIST_TIMEOUT"] = str(opts.timeout)
    with tempfile.TemporaryDirectory(prefix="kiln-dist-") as status_dir:
        env[STATUS_DIR_VARIABLE] = status_dir
        command = mpiexec_command(mpiexec, opts.nproc, opts.script, opts.args, opts.hostfile)
        try:
            code = subprocess.call(command, env=env)
        except KeyboardInterrupt:
            code = 130
        if code != 0:
            print(f"kiln.distributed.run: the job failed (mpiexec exit code {code})", file=sys.stderr)
            for line in rank_report(status_dir, opts.nproc):
                print(line, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
