"""Backends lower an optimized graph to a runnable Plan.

`interpret` is the reference: NumPy kernels node by node. `cpu` is the same Plan with
chains of elementwise nodes fused into generated C (falls back to `interpret`, with
one warning, when no C compiler works). "auto" is "cpu" only when a compiler was seen
to build a tiny library (once per process), not merely found on PATH.
"""
from typing import Any, Callable

from . import cpu
from .interpret import Plan, lower

BACKENDS = {"interpret": lower, "cpu": cpu.lower}


def get_backend(name: Any) -> tuple[str, Callable]:
    """(name, lowering function) for a backend name ("auto" is "cpu" when a compiler works) or a
    backend object with ``name`` and ``lower`` (e.g. ``CUDACompiler(dtype="float16")``), which may
    refuse here, through its ``ensure_available()``, when its device is missing."""
    if not isinstance(name, str):
        lower, label = getattr(name, "lower", None), getattr(name, "name", None)
        if not callable(lower) or not isinstance(label, str):
            raise ValueError(f"unknown backend {name!r}: expected one of {['auto', *BACKENDS]} or a backend object "
                             "such as CUDACompiler(dtype='float16')")
        ensure = getattr(name, "ensure_available", None)
        if ensure is not None:
            ensure()
        return label, lower
    if name == "auto":
        name = "cpu" if cpu.available() else "interpret"
    try:
        return name, BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}: expected one of {['auto', *BACKENDS]}") from None


__all__ = ["BACKENDS", "Plan", "get_backend", "lower"]
