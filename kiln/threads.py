"""`set_num_threads` and `get_num_threads`, PyTorch's names for the threads kiln computes with.

kiln's threads are NumPy's OpenBLAS threads (matrix products, eagerly and in compiled plans) and the
team of generated kernels (kiln/jit/backends/cpu/parallel.py). Both start at the CPUs this process
may run on.

>>> kiln.set_num_threads(1)   # reproducible timings on one core
"""
from __future__ import annotations

from .jit.backends.cpu import blas, parallel


def get_num_threads() -> int:
    """The threads generated kernels (and OpenBLAS, unless told otherwise) use."""
    return parallel.kernel_threads()


def set_num_threads(n: int) -> None:
    """Use `n` threads (>= 1) in generated kernels and NumPy's OpenBLAS from now on."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: expected a whole number of threads >= 1, got {n!r}")
    parallel.set_kernel_threads(n)
    blas.set_blas_threads(n)
