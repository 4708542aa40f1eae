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
    auto = name == "auto"
    if auto:
        name = "cpu" if cpu.available() else "interpret"
    try:
        return name, _for_inputs_device(name, BACKENDS[name], auto)
    except KeyError:
        raise ValueError(f"unknown backend {name!r}: expected one of {['auto', *BACKENDS]}") from None


def _on_gpu(graph: Any) -> bool:
    return any(getattr(v.device, "type", None) == "cuda" for v in graph.inputs)


def _for_inputs_device(name: str, lower: Callable, auto: bool) -> Callable:
    """`lower`, for graphs whose inputs are on the CPU. A graph with GPU inputs goes to
    ``CUDACompiler()`` under "auto" (as torch.compile picks its backend by the inputs' device),
    and is refused, with the fix, by a backend named for the CPU."""
    def lower_for_device(graph: Any) -> Any:
        if _on_gpu(graph):
            if not auto:
                raise RuntimeError(f"backend={name!r} compiles for the CPU, and this call's inputs are on the GPU; "
                                   "use backend='auto' or backend=CUDACompiler(...) for GPU tensors, or move the "
                                   "inputs to the CPU with .cpu()")
            from .cuda import CUDACompiler  # noqa: PLC0415

            return CUDACompiler().lower(graph)
        return lower(graph)

    lower_for_device.__wrapped__ = lower  # type: ignore[attr-defined]
    return lower_for_device


__all__ = ["BACKENDS", "Plan", "get_backend", "lower"]
