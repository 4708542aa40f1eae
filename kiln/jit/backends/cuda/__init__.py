"""The CUDA backend: `CUDACompiler`, the CUDA renderer and the disk-cache keys of its modules.

What runs without a GPU: building a `CUDACompiler` (its arguments are validated), rendering
CUDA source for every fused group the CPU backend forms (language.py: `CUDALanguage`, the
C-style renderer's CUDA subclass; kernels.py: the kernels' parallel structure), and the
cache keys (cache_key.py). Lowering a graph needs CuPy and a GPU (plan.py). See
docs/cuda.md for what has been verified and what has not.
"""
from .cache_key import module_key
from .compiler import DTYPES, CUDACompiler
from .kernels import render_kernel, render_module
from .language import CUDA, CUDALanguage

__all__ = ["CUDA", "CUDACompiler", "CUDALanguage", "DTYPES", "module_key", "render_kernel", "render_module"]
