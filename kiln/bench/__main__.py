"""``python -m kiln.bench [workload] [options]``: run one benchmark workload, or list them."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from . import WORKLOADS


def build_parser(prog: str = "python -m kiln.bench") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="kiln benchmarks, side by side with PyTorch.")
    sub = parser.add_subparsers(dest="workload", metavar="WORKLOAD")
    for name, module in WORKLOADS.items():
        child = sub.add_parser(name, help=module.DESCRIPTION, description=module.__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(child)
    return parser


def list_workloads(prog: str = "python -m kiln.bench") -> str:
    width = max(len(name) for name in WORKLOADS)
    lines = [f"workloads (run one with: {prog} WORKLOAD [--help]):"]
    lines += [f"  {name.ljust(width)}  {module.DESCRIPTION}" for name, module in WORKLOADS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, prog: str = "python -m kiln.bench") -> int:
    """Entry point; returns the exit code. No workload given: list the workloads.

    ``--peers`` (first) is short for the `targets` workload: every target, beside the peers.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--peers"]:
        argv[:1] = ["targets"]
    args = build_parser(prog).parse_args(argv)
    if args.workload is None:
        print(list_workloads(prog))
        return 0
    return WORKLOADS[args.workload].run(args)


if __name__ == "__main__":
    sys.exit(main())
