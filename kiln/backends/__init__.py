"""`kiln.backends` and the global precision/determinism switches, as ``torch.backends``.

The flags exist so that scripts written for PyTorch run: kiln stores each value and
hands it back, but none of them changes how kiln computes. On the CPU, float32 matmuls
always run in full float32 (``set_float32_matmul_precision`` has nothing to trade), and
kiln's kernels are deterministic (``use_deterministic_algorithms`` is already the case).
kiln does not use cuDNN, MPS or oneDNN (``is_available()`` is False for each).

>>> kiln.backends.cudnn.benchmark = True            # accepted; no effect
>>> kiln.set_float32_matmul_precision("high")        # accepted; float32 stays full precision
"""
from __future__ import annotations

from . import cuda, cudnn, mkldnn, mps

__all__ = ["are_deterministic_algorithms_enabled", "cuda", "cudnn", "get_float32_matmul_precision",
           "is_deterministic_algorithms_warn_only_enabled", "mkldnn", "mps", "set_float32_matmul_precision",
           "use_deterministic_algorithms"]

PRECISIONS = ("highest", "high", "medium")
_flags = {"matmul_precision": "highest", "deterministic": False, "warn_only": False}


def set_float32_matmul_precision(precision: str) -> None:
    """Accept PyTorch's "highest", "high" or "medium"; kiln's float32 matmuls stay full precision either way."""
    if precision not in PRECISIONS:
        raise ValueError(f"set_float32_matmul_precision: expected one of {PRECISIONS}, got {precision!r}")
    _flags["matmul_precision"] = precision


def get_float32_matmul_precision() -> str:
    """The value last given to `set_float32_matmul_precision` ("highest" by default)."""
    return str(_flags["matmul_precision"])


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Record PyTorch's determinism switch; kiln's kernels give the same results run to run already."""
    if not isinstance(mode, bool) or not isinstance(warn_only, bool):
        raise TypeError(f"use_deterministic_algorithms expects bools, got mode={mode!r}, warn_only={warn_only!r}")
    _flags["deterministic"] = mode
    _flags["warn_only"] = warn_only


def are_deterministic_algorithms_enabled() -> bool:
    return bool(_flags["deterministic"])


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return bool(_flags["warn_only"])
