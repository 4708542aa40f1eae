"""``python -m kiln.fuzz --minutes N [--seed S]``: differential fuzzing of kiln.compile.

Prints how many programs ran and how many mismatched (with the first few shrunk
mismatching programs as Python source) and exits 1 on any mismatch.
"""
from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=1.0, help="time budget (default 1)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the batch seeds (default: random)")
    parser.add_argument("--batch", type=int, default=50, help="programs per hypothesis batch (default 50)")
    parser.add_argument("--max-ops", type=int, default=6, help="most ops per program (default 6)")
    parser.add_argument("--module-every", type=int, default=4,
                        help="every k-th batch draws module programs; 0: never (default 4)")
    parser.add_argument("--show", type=int, default=3, help="mismatching programs to print (default 3)")
    parser.add_argument("--no-shrink", action="store_true", help="report failures as found, unshrunk")
    args = parser.parse_args(argv)

    from .campaign import run_campaign  # noqa: PLC0415 - imports hypothesis

    seed = args.seed if args.seed is not None else int(time.time() * 1000) % 2 ** 31
    print(f"kiln.fuzz: {args.minutes:g} minute(s), seed {seed}", flush=True)
    start = time.monotonic()
    campaign = run_campaign(args.minutes * 60, seed=seed, batch=args.batch, module_every=args.module_every,
                            max_ops=args.max_ops, shrink=not args.no_shrink,
                            progress=lambda line: print(line, flush=True))
    print(f"{campaign.summary()} in {time.monotonic() - start:.0f} s")
    distinct = {f.minimal.source(): f for f in campaign.failures}  # the same bug often shrinks alike
    if campaign.failures:
        print(f"{len(distinct)} distinct shrunk mismatching program(s)")
    for k, failure in enumerate(list(distinct.values())[: args.show]):
        print(f"\nmismatch {k + 1} ({failure.kind}), shrunk:\n{failure.minimal.source()}")
        for line in failure.problems[:6]:
            print("  " + line.replace("\n", "\n  "))
    return 1 if campaign.failures else 0


if __name__ == "__main__":
    sys.exit(main())
