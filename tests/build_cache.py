"""A disk cache for the test suite's own compiler runs (the emulated CUDA kernels, nvcc), as ccache keeps one.

A build whose inputs are byte for byte those of an earlier run (the compiler, by its ``--version`` text and
path; its flags; the source) copies that run's outputs instead of compiling again. What the tests check is
the compiler's answer on this exact source, which a deterministic compiler gives the same way every time; a
changed source, flag or compiler builds afresh. A failed build is never cached.

The folder is $KILN_TEST_BUILD_CACHE (default ~/.cache/kiln-tests); ``KILN_TEST_BUILD_CACHE=off`` builds every
time.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable


def cache_folder() -> Path | None:
    """Where cached outputs live, or None when caching is off."""
    setting = os.environ.get("KILN_TEST_BUILD_CACHE", "")
    if setting.lower() in ("off", "0", "no", "false"):
        return None
    return Path(setting).expanduser() if setting else Path.home() / ".cache" / "kiln-tests"


@functools.cache
def compiler_identity(compiler: str) -> str:
    """The compiler's path and its ``--version`` output (a reinstalled or upgraded compiler keys anew)."""
    proc = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
    return f"{os.path.realpath(compiler)}\n{proc.stdout}{proc.stderr}"


def cached_build(compiler: str, flags: list[str], source: str, outputs: list[Path],
                 build: Callable[[], None]) -> None:
    """Make `outputs` (files `build()` writes from `source` with `compiler` and `flags`, paths left out of
    `flags`): copied from the cache when the same inputs were built before, else built now and cached."""
    folder = cache_folder()
    if folder is None:
        build()
        return
    key = hashlib.sha256(json.dumps([compiler_identity(compiler), flags, [p.name for p in outputs], source])
                         .encode()).hexdigest()[:32]
    entry = folder / key
    if all((entry / p.name).is_file() for p in outputs):
        for p in outputs:
            shutil.copyfile(entry / p.name, p)
        return
    build()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=folder))
        for p in outputs:
            shutil.copyfile(p, staging / p.name)
        try:
            staging.rename(entry)  # whole or not at all; a concurrent build of the same key may win
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError:
        pass  # an unwritable cache only costs the next run a build
