"""Disk-cache keys of compiled CUDA modules.

A module compiled by NVRTC is valid only for the source it came from, the GPU
architecture it targets (compute capability, e.g. ``sm_90``), the CUDA version that
compiled it, and the compile options: the key hashes all four, so a cache directory
shared between machines, drivers or toolkits never serves a module built for another.
"""
from __future__ import annotations

import hashlib
from typing import Any, Sequence

KEY_VERSION = "kiln-cuda-1"  # bumped when the renderer's output format changes incompatibly


def arch_name(compute_capability: Any) -> str:
    """``(9, 0)``, ``"90"``, ``90`` or ``"sm_90"`` -> ``"sm_90"``."""
    if isinstance(compute_capability, tuple) and len(compute_capability) == 2:
        major, minor = compute_capability
        if not all(isinstance(x, int) and x >= 0 for x in (major, minor)):
            raise ValueError(f"compute capability must be two non-negative ints, got {compute_capability!r}")
        return f"sm_{major}{minor}"
    text = str(compute_capability)
    digits = text[3:] if text.startswith("sm_") else text
    if isinstance(compute_capability, bool) or not digits.isdigit() or len(digits) < 2:
        raise ValueError(f"compute capability must look like (9, 0), '90' or 'sm_90', got {compute_capability!r}")
    return f"sm_{digits}"


def cuda_version_name(version: Any) -> str:
    """CUDA's integer version (``12090``) or a string (``"12.9"``) -> ``"12.9"``."""
    if isinstance(version, int) and not isinstance(version, bool) and version > 0:
        return f"{version // 1000}.{(version % 1000) // 10}"
    if isinstance(version, str) and version.replace(".", "").isdigit() and version.count(".") <= 2:
        return version
    raise ValueError(f"CUDA version must be an int such as 12090 or a string such as '12.9', got {version!r}")


def module_key(source: str, *, compute_capability: Any, cuda_version: Any, options: Sequence[str] = ()) -> str:
    """The hex digest naming a compiled module in the disk cache.

    >>> module_key(src, compute_capability=(9, 0), cuda_version=12090, options=["--std=c++17"])
    """
    if not isinstance(source, str):
        raise TypeError(f"module_key expects the CUDA source as a str, got {type(source).__name__}")
    parts = [KEY_VERSION, arch_name(compute_capability), cuda_version_name(cuda_version),
             "\x1f".join(str(o) for o in options), source]
    return hashlib.sha256("\x1e".join(parts).encode()).hexdigest()


def current_key(source: str, options: Sequence[str] = (), device: int = 0) -> str:  # pragma: no cover - GPU only
    """`module_key` for the GPU CuPy sees as `device` and the CUDA runtime CuPy runs on."""
    from ....device import _cuda_module  # noqa: PLC0415

    cupy = _cuda_module()
    cc = cupy.cuda.Device(device).compute_capability  # e.g. "90"
    return module_key(source, compute_capability=cc, cuda_version=cupy.cuda.runtime.runtimeGetVersion(),
                      options=options)
