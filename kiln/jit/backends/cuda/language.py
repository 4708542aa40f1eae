"""CUDALanguage: the CUDA C++ spelling of kernels, a subclass of the C-style renderer.

It shares every primitive spelling of `CStyleLanguage` (render/cstyle.py) and overrides
only what CUDA spells differently:

* kernels are ``extern "C" __global__`` (unmangled names for ``cupy.RawModule``), pointers
  are ``__restrict__``, and there is no OpenMP;
* the loop over independent elements is a grid-stride loop over thread indices, and the
  loop over rows of a row kernel is a grid-stride loop over blocks (`block_loop`);
* half precision: with ``storage="float16"`` (``"bfloat16"``), float32 values of more than
  one element live in global memory as ``__half`` (``__nv_bfloat16``; scalars such as an
  epsilon or a count stay float32, so one value is stored alike in every kernel), are loaded with ``__half2float``
  (``__bfloat162float``), computed in float32 and stored with ``__float2half_rn``
  (``__float2bfloat16_rn``); a graph's own float16/bfloat16 values are handled the same way;
* floor division is a ``__device__`` helper in the prelude (the C prelude's host helper
  is not visible to device code).

Contraction of a*b+c into an FMA is turned off by the compile options (``--fmad=false``),
as the C prelude turns it off for the host compiler.
"""
from __future__ import annotations

from typing import ClassVar

from ..render.cstyle import OPS, CStyleLanguage

COMPILE_OPTIONS = ("--std=c++17", "--fmad=false")  # for NVRTC and for nvcc alike

PRELUDE = r"""#include <cuda_fp16.h>
#include <cuda_bf16.h>

/* NVRTC has no <math.h>: the infinity and NaN that reductions and literals name. */
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

/* Python's float floor division as NumPy computes it (see the C renderer's prelude). */
template <typename T> __device__ __forceinline__ T kiln_floor_divide(T a, T b) {
    if (b == 0) return a / b;
    T r = fmod(a, b);
    T q = (a - r) / b;
    if (r != 0 && ((b < 0) != (r < 0))) q -= 1;
    if (q == 0) return copysign((T)0, a / b);
    T whole = floor(q);
    return q - whole > (T)0.5 ? whole + 1 : whole;
}

/* Reducers of a row kernel's block: a sum, and a NaN-propagating maximum (as np.maximum). */
struct KilnSum {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct KilnMax {
    template <typename T> __device__ __forceinline__ T operator()(T a, T b) const {
        return (a > b || a != a) ? a : b;
    }
};

/* Reduce one value per thread over the whole block (blockDim.x a multiple of 32, at most 1024);
   every thread gets the result. `shared` holds 32 values of T. */
template <typename T, typename Op>
__device__ __forceinline__ T kiln_block_reduce(T v, T identity, T *shared, Op op) {
    for (int s = 16; s > 0; s >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, s));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); /* the previous reduction has read shared[0] */
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)((blockDim.x + 31) >> 5) ? shared[lane] : identity;
        for (int s = 16; s > 0; s >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, s));
        if (lane == 0) shared[0] = v;
    }
    __syncthreads();
    return shared[0];
}
"""

HALF_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16"}
_TO_FLOAT = {"__half": "__half2float", "__nv_bfloat16": "__bfloat162float"}
_FROM_FLOAT = {"__half": "__float2half_rn", "__nv_bfloat16": "__float2bfloat16_rn"}


class CUDALanguage(CStyleLanguage):
    """CUDA C++ for NVRTC / nvcc; ``storage`` is the dtype float32 values are kept in ("float32" or a half type)."""

    name: ClassVar[str] = "cuda"
    types: ClassVar[dict[str, str]] = {"float32": "float", "float64": "double", "bool": "unsigned char",
                                       **HALF_TYPES}
    ops: ClassVar[dict[str, str]] = {**OPS, "floor_divide": "kiln_floor_divide({0}, {1})"}
    restrict: ClassVar[str] = "__restrict__"
    kernel_qualifier: ClassVar[str] = 'extern "C" __global__'
    prelude: ClassVar[str] = PRELUDE

    def __init__(self, storage: str = "float32"):
        if storage not in ("float32", *HALF_TYPES):
            raise ValueError(f"CUDALanguage(storage=...) expects 'float32', 'float16' or 'bfloat16', got {storage!r}")
        self.storage = storage

    # ---- types: what is stored vs. what is computed ------------------------------------------
    def storage_type(self, dtype_name: str, size: int = 2) -> str:
        """The C type of a value of `dtype_name` and `size` elements in global memory (float32 -> __half
        in float16 storage, except a one-element value, which stays float32)."""
        if dtype_name == "float32" and self.storage != "float32" and size != 1:
            return self.types[self.storage]
        return self.type_name(dtype_name)

    def compute_type(self, dtype_name: str) -> str:
        """The C type a value of `dtype_name` is computed in: float for the half types (float32 math)."""
        ctype = self.type_name(dtype_name)
        return "float" if ctype in _TO_FLOAT else ctype

    def load_value(self, pointer: str, index: str, dtype_name: str, size: int = 2) -> str:
        """A load converted to the compute type (``__half2float(p[i])`` for half storage)."""
        raw = self.load(pointer, index)
        convert = _TO_FLOAT.get(self.storage_type(dtype_name, size))
        return f"{convert}({raw})" if convert else raw

    def store_value(self, pointer: str, index: str, value: str, dtype_name: str, size: int = 2) -> str:
        """A store converted from the compute type (``__float2half_rn(v)`` for half storage)."""
        convert = _FROM_FLOAT.get(self.storage_type(dtype_name, size))
        return self.store(pointer, index, f"{convert}({value})" if convert else value)

    # ---- parallel loops -------------------------------------------------------------------------
    def outer_loop(self, var: str, stop: str) -> str:
        """A grid-stride loop over threads: each thread takes every (gridDim*blockDim)-th index."""
        t = self.index_type
        return (f"for ({t} {var} = blockIdx.x * ({t})blockDim.x + threadIdx.x; {var} < {stop}; "
                f"{var} += ({t})gridDim.x * blockDim.x) {{")

    def block_loop(self, var: str, stop: str) -> str:
        """A grid-stride loop over blocks (one row per block at a time)."""
        t = self.index_type
        return f"for ({t} {var} = blockIdx.x; {var} < {stop}; {var} += gridDim.x) {{"

    def thread_loop(self, var: str, stop: str) -> str:
        """A block-stride loop: the block's threads share [0, stop)."""
        t = self.index_type
        return f"for ({t} {var} = threadIdx.x; {var} < {stop}; {var} += blockDim.x) {{"


CUDA = CUDALanguage()
