"""Compile CUDA source with nvcc for the architectures CI checks (tests skip where nvcc is missing).

`compile_ptx` runs nvcc's front end and NVVM (source -> PTX) once per arch: quick, and it
catches every C++ or CUDA error in the source. `compile_object` also assembles machine code
(ptxas) for every arch, as NVRTC + the driver would: slower, so its test is marked slow.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from build_cache import cached_build
from kiln.jit.backends.cuda.language import COMPILE_OPTIONS

NVCC = shutil.which("nvcc")
ARCHS = ("sm_80", "sm_90")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")


def _run(flags: list[str], source: str, cu: Path, out: Path) -> None:
    """nvcc `flags` on `cu` (holding `source`) into `out`, or its output from an identical earlier run."""
    flags = [*flags, *COMPILE_OPTIONS, "-Werror", "all-warnings"]

    def build() -> None:
        proc = subprocess.run([NVCC, *flags, str(cu), "-o", str(out)], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise AssertionError(f"nvcc {' '.join(flags)} failed on {cu}:\n{proc.stdout}\n{proc.stderr}")

    cached_build(NVCC, flags, source, [out], build)


def compile_ptx(source: str, directory: Path, name: str) -> list[Path]:
    """nvcc --ptx for each arch in ARCHS; the PTX files (each checked to hold every kernel's entry)."""
    cu = directory / f"{name}.cu"
    cu.write_text(source)
    outs = []
    for arch in ARCHS:
        out = directory / f"{name}.{arch}.ptx"
        _run(["--ptx", f"-arch={arch}"], source, cu, out)
        outs.append(out)
    return outs


def compile_object(source: str, directory: Path, name: str) -> Path:
    """nvcc -c with machine code for every arch in ARCHS."""
    cu = directory / f"{name}.cu"
    cu.write_text(source)
    obj = directory / f"{name}.o"
    gencode = [arg for arch in ARCHS for arg in ("-gencode", f"arch=compute_{arch[3:]},code={arch}")]
    _run(["-c", *gencode], source, cu, obj)
    assert obj.stat().st_size > 0
    return obj
