"""Compile C source to a shared library with the system compiler, cached on disk by hash.

The cache lives in ``$KILN_CACHE_DIR`` (default ``~/.cache/kiln``) under ``kernels/``;
`kiln cache clear` empties it. Builds are atomic (temp file + rename), so concurrent
processes never load a half-written library.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-std=c99", "-fPIC", "-shared"]
_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}


class CompilerUnavailable(RuntimeError):
    """No working C compiler was found (set $CC, or install gcc or clang)."""


def cache_dir() -> Path:
    configured = os.environ.get("KILN_CACHE_DIR")
    base = Path(configured).expanduser() if configured else Path.home() / ".cache" / "kiln"
    return base / "kernels"


def find_compiler() -> str | None:
    """$CC if set, else the first of cc, gcc, clang on PATH."""
    configured = os.environ.get("CC")
    if configured:
        return shutil.which(configured) or configured
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def build(source: str) -> ctypes.CDLL:
    """The loaded library for `source`, compiling it on the first use on this machine."""
    compiler = find_compiler()
    if compiler is None:
        raise CompilerUnavailable("no C compiler found: install gcc or clang, or set $CC")
    digest = hashlib.sha256("\n".join([source, compiler, *FLAGS, platform.machine()]).encode()).hexdigest()[:24]
    with _lock:
        lib = _loaded.get(digest)
        if lib is not None:
            return lib
        target = cache_dir() / f"k_{digest}.so"
        if not target.exists():
            _compile(compiler, source, target)
        lib = _loaded[digest] = ctypes.CDLL(str(target))
        return lib


def _compile(compiler: str, source: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / "kernel.c"
        src.write_text(source)
        out = Path(tmp) / target.name
        result = subprocess.run([compiler, *FLAGS, str(src), "-o", str(out), "-lm"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise CompilerUnavailable(f"{compiler} failed to build a kernel:\n{result.stderr[-2000:]}")
        os.replace(out, target)
