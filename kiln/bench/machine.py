"""What a benchmark ran on: the CPU and its SIMD level, thread counts and library versions, as report lines."""
from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
from types import ModuleType

from ..jit.backends.cpu import simd
from .threads import available_cpus


def c_compiler() -> str:
    """The first line of the C compiler's --version ($CC, else cc), or "none"."""
    cc = (os.environ.get("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return "none"
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "none"
    return out.splitlines()[0] if out else "none"


def _peer(name: str, module: ModuleType | None) -> str:
    """", torch 2.13.0", or why there is no version: not installed, or installed but not used by this run."""
    if module is not None:
        return f", {name} {module.__version__}"
    return f", {name} {'not used' if importlib.util.find_spec(name) is not None else 'not installed'}"


def describe(blas_threads: int, torch: ModuleType | None, jax: ModuleType | None) -> list[str]:
    """Report lines naming the machine (CPU, its SIMD level and the kernels'), thread counts and versions."""
    import numpy  # noqa: PLC0415

    import kiln  # noqa: PLC0415

    unset = [v for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if v in os.environ]
    lines = [f"machine: {simd.describe()}; {available_cpus()} CPUs available; {platform.platform()}",
             f"threads: NumPy BLAS {blas_threads}" + (f", torch {torch.get_num_threads()}" if torch else ""),
             f"versions: python {platform.python_version()}, kiln {getattr(kiln, '__version__', '?')}, "
             f"numpy {numpy.__version__}"
             + _peer("torch", torch) + _peer("jax", jax)
             + f"; C compiler: {c_compiler()}"]
    if unset:
        lines.append(f"warning: {', '.join(unset)} set: NumPy's BLAS may be slowed; benchmark with "
                     f"`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m kiln.bench ...`")
    return lines
