"""`CUDACompiler`: the backend object for ``kiln.compile(f, backend=CUDACompiler(dtype=...))``.

It holds the validated settings of the CUDA backend: the storage dtype of activations
(``"float32"``, ``"float16"`` or ``"bfloat16"``; half types are stored in 16 bits and
computed in float32) and, optionally, the GPU architecture to compile for (``"sm_90"``;
by default the current GPU's). Like ``jax.jit(f, backend="gpu")`` on a machine without a
GPU, compiling with it where CuPy sees no GPU raises DeviceUnavailableError at
``kiln.compile`` time; it never falls back to the CPU quietly.

>>> fast = kiln.compile(model, backend=CUDACompiler(dtype="float16"))   # needs a GPU
"""
from __future__ import annotations

import re
from typing import Any

from ....device import DeviceUnavailableError, _cuda_module, _probe_gpu

DTYPES = ("float32", "float16", "bfloat16")
_DTYPE_ALIASES = {"half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32", "fp32": "float32"}
_ARCH = re.compile(r"^sm_[0-9]{2,3}[a-z]?$")


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, str):
        name = _DTYPE_ALIASES.get(dtype, dtype)
    elif hasattr(dtype, "name") and isinstance(dtype.name, str):  # a kiln.dtype
        name = dtype.name
    else:
        raise TypeError(f"CUDACompiler(dtype=...) expects a dtype name such as 'float16' or a kiln dtype, "
                        f"got {type(dtype).__name__} {dtype!r}")
    if name not in DTYPES:
        raise ValueError(f"CUDACompiler(dtype=...) expects one of {list(DTYPES)}, got {dtype!r}; other dtypes "
                         "compile on the CPU backend")
    return name


class CUDACompiler:
    """The CUDA backend, parameterized by the storage dtype (float32 accumulation always).

    ``dtype``: "float32" (default), "float16" or "bfloat16" (or a kiln dtype / "half" /
    "bf16"). ``arch``: a target such as "sm_80"; None means the current GPU's. Building the
    object needs no GPU (the renderer and cache keys work anywhere); compiling with it does.
    """

    def __init__(self, dtype: Any = "float32", *, arch: str | None = None):
        self.dtype = _dtype_name(dtype)
        if arch is not None and (not isinstance(arch, str) or not _ARCH.match(arch)):
            raise ValueError(f"CUDACompiler(arch=...) expects a target such as 'sm_80' or 'sm_90', got {arch!r}; "
                             "pass None to compile for the current GPU")
        self.arch = arch

    @property
    def name(self) -> str:
        """The backend's name in cache keys and messages, e.g. ``"cuda[float16]"``."""
        return f"cuda[{self.dtype}{',' + self.arch if self.arch else ''}]"

    def __repr__(self) -> str:
        arch = f", arch={self.arch!r}" if self.arch else ""
        return f"CUDACompiler(dtype={self.dtype!r}{arch})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CUDACompiler) and (self.dtype, self.arch) == (other.dtype, other.arch)

    def __hash__(self) -> int:
        return hash(("CUDACompiler", self.dtype, self.arch))

    def ensure_available(self) -> None:
        """Raise DeviceUnavailableError (what is missing, and the fix) when CuPy sees no GPU."""
        count, reason = _probe_gpu()
        if not count:
            raise DeviceUnavailableError(
                f"backend={self!r} compiles for an NVIDIA GPU through CuPy, and {reason}; use backend='auto' "
                "(the CPU) here, or run on a machine with a GPU (check kiln.cuda.is_available() first)")

    def lower(self, graph: Any) -> Any:
        """graph -> a plan that runs on the GPU (see kiln/jit/backends/cuda/plan.py)."""
        self.ensure_available()
        from .plan import lower_cuda  # noqa: PLC0415 - needs CuPy

        return lower_cuda(graph, self, _cuda_module())
