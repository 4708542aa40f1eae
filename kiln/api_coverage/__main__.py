"""``python -m kiln.api_coverage``: regenerate or check the PyTorch API coverage table.

    python -m kiln.api_coverage --write                 # re-mark every name, keep the use counts
    python -m kiln.api_coverage --write --corpus DIR    # recount uses over the .py files in DIR
    python -m kiln.api_coverage --check                 # exit 1 if the checked-in table is stale

The corpus folder holds one subfolder per project (its name is recorded in the table).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .table import GUIDE_PATH, PAGE_PATH, build, count_by_area, load, render_page, with_counts, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kiln.api_coverage", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write the table and the docs pages")
    parser.add_argument("--check", action="store_true", help="exit 1 if the table or the docs are stale")
    parser.add_argument("--corpus", type=Path, help="a folder of training code to count uses in")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("python -m kiln.api_coverage needs PyTorch installed (pip install torch)", file=sys.stderr)
        return 2
    old = load()
    if args.corpus is not None:
        uses = count_by_area(args.corpus)
        corpus = sorted(p.name.replace("+", "/") for p in args.corpus.iterdir() if p.is_dir())
    else:
        uses = {key: {n: e["uses"] for n, e in entries.items()} for key, entries in old["areas"].items()}
        corpus = old["corpus"]
    table = build(torch.__version__.split("+")[0], uses, corpus)
    if args.write:
        write(table)
        print(f"wrote the table for torch {table['torch_version']}")
        return 0
    stale = table["areas"] != old["areas"] or PAGE_PATH.read_text() != render_page(old) or \
        GUIDE_PATH.read_text() != with_counts(GUIDE_PATH.read_text(), old)
    if args.check and stale:
        print("the API coverage table is stale: run python -m kiln.api_coverage --write", file=sys.stderr)
        return 1
    print("the API coverage table is up to date" if not stale else "the API coverage table is stale")
    return 0


if __name__ == "__main__":
    sys.exit(main())
