"""Run rendered CUDA kernels on the CPU, under an emulation of CUDA's execution model.

The CUDA source is compiled by the host C++ compiler with a small header that stands in for
CUDA: each launch runs one block of THREADS std::threads (two warps: the kernels read
blockDim, so any multiple of 32 works; gridDim = 1, so their grid-stride loops cover every
element and row), ``__syncthreads`` is a barrier of the block,
``__shfl_down_sync`` exchanges values through a per-warp barrier, ``__shared__`` arrays are
shared by the block's threads, ``__half`` is the compiler's IEEE binary16 (``_Float16``,
round-to-nearest-even conversions) and ``__nv_bfloat16`` is a 16-bit pattern with
round-to-nearest-even from float32. FMA contraction is off, as ``--fmad=false`` asks of nvcc.

This checks what the kernels compute (index math, the block reductions, the order of row
statements, half loads and stores) without a GPU. It does not check anything only a GPU
shows: its memory model, occupancy, the precision of its math intrinsics, or speed.
"""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from build_cache import cached_build
from kiln.jit.backends.cuda.kernels import render_module
from kiln.jit.backends.cuda.language import CUDALanguage

CXX = shutil.which("g++")
needs_cxx = pytest.mark.skipif(CXX is None, reason="no host C++ compiler (g++)")

HEADER = r"""
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
using namespace std;

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

typedef _Float16 __half;
struct __nv_bfloat16 { uint16_t bits; };
static inline float __half2float(__half h) { return (float)h; }
static inline __half __float2half_rn(float f) { return (__half)f; }
static inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.bits << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40u)};  /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return {(uint16_t)(u >> 16)};
}

struct kiln_dim3 { unsigned int x; };
static thread_local kiln_dim3 threadIdx, blockIdx, blockDim, gridDim;
static std::barrier<> *kiln_block_barrier;
static std::barrier<> *kiln_warp_barrier[32];
static double kiln_slots[32][32];

static inline void __syncthreads() { kiln_block_barrier->arrive_and_wait(); }

template <typename T> static T __shfl_down_sync(unsigned, T v, int s) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    kiln_slots[warp][lane] = (double)v;
    kiln_warp_barrier[warp]->arrive_and_wait();
    const double r = lane + s < 32 ? kiln_slots[warp][lane + s] : (double)v;
    kiln_warp_barrier[warp]->arrive_and_wait();
    return (T)r;
}

template <typename F> static void kiln_launch(unsigned int block, F body) {
    std::barrier<> whole(block);
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    for (unsigned int w = 0; w < block / 32; w++) {
        warps.emplace_back(new std::barrier<>(32));
        kiln_warp_barrier[w] = warps.back().get();
    }
    kiln_block_barrier = &whole;
    std::vector<std::thread> threads;
    for (unsigned int t = 0; t < block; t++)
        threads.emplace_back([&, t] {
            threadIdx.x = t; blockIdx.x = 0; blockDim.x = block; gridDim.x = 1;
            body();
        });
    for (auto &th : threads) th.join();
}
"""

THREADS = 64  # threads of the emulated block: two warps, so the reduction across warps runs too
_SIGNATURE = re.compile(r'^extern "C" __global__ void (\w+)\((.*)\) \{$', re.M)


def _emulated_source(source: str) -> str:
    body = source.replace("#include <cuda_fp16.h>", "").replace("#include <cuda_bf16.h>", "")
    wrappers = []
    for name, params in _SIGNATURE.findall(source):
        args = [p.split()[-1].lstrip("*") for p in params.split(", ")]
        wrappers.append(f'extern "C" void emu_{name}({params}) {{\n'
                        f"    kiln_launch({THREADS}, [&] {{ {name}({', '.join(args)}); }});\n}}")
    return "\n".join([HEADER, body, *wrappers])


def build_emulated(source: str, directory: Path, name: str) -> ctypes.CDLL:
    """Build CUDA `source` for the host; each kernel K is launched by calling ``emu_K`` with K's arguments."""
    cpp = directory / f"{name}.cpp"
    text = _emulated_source(source)
    cpp.write_text(text)
    lib = directory / f"{name}.so"
    flags = ["-std=c++20", "-O0", "-pthread", "-shared", "-fPIC", "-ffp-contract=off", "-w"]

    def build() -> None:
        proc = subprocess.run([CXX, *flags, str(cpp), "-o", str(lib)], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise AssertionError(f"the host compiler could not build the emulated CUDA source {cpp}:\n{proc.stderr}")

    cached_build(CXX, flags, text, [lib], build)
    return ctypes.CDLL(str(lib))


class EmulatedModule:
    """A plan's kernels rendered for `storage`, built for the host; `run(k, arrays)` launches kernel k."""

    def __init__(self, kernels: list, storage: str, directory: Path):
        self.kernels, self.storage = kernels, storage
        source, self.names = render_module(kernels, CUDALanguage(storage))
        self.lib = build_emulated(source, directory, f"emulated_{storage}")

    def holder(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the array as the kernel stores it, the float32/float64/bool values that holds)."""
        return stored_as(a, self.storage)

    def values(self, stored: np.ndarray, dtype: Any) -> np.ndarray:
        return values_of(stored, dtype)

    def run(self, k: int, arrays: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Launch kernel k on host inputs; (its outputs as float32/... values, the inputs' stored values)."""
        kernel = self.kernels[k]
        group = kernel.group
        outs = getattr(group, "outputs", None) or [group.root.out]
        stored, rounded = zip(*[self.holder(np.asarray(a)) for a in arrays]) if arrays else ((), ())
        out_stored = [self.holder(np.zeros(tuple(v.shape), v.dtype.np))[0] for v in outs]
        if hasattr(group, "space"):
            outer, inner = group.space.outer, group.space.inner
        else:
            shape = tuple(group.root.out.shape)
            outer, inner = int(np.prod(shape[:kernel.split])), int(np.prod(shape[kernel.split:]))
        fn = getattr(self.lib, f"emu_{self.names[k]}")
        fn.restype = None
        fn(ctypes.c_longlong(outer), ctypes.c_longlong(inner), *[ctypes.c_void_p(a.ctypes.data) for a in out_stored],
           *[ctypes.c_void_p(a.ctypes.data) for a in stored])
        return [self.values(o, v.dtype.np) for o, v in zip(out_stored, outs)], list(rounded)


def stored_as(a: np.ndarray, storage: str) -> tuple[np.ndarray, np.ndarray]:
    """(`a` as a kernel of `storage` keeps it in memory, the values that holds): float32 arrays of more
    than one element become float16 or bfloat16 bits (uint16); the rest stay as they are."""
    if a.dtype != np.float32 or storage == "float32" or a.size == 1:
        return np.array(a, order="C"), a
    if storage == "float16":
        with np.errstate(over="ignore", invalid="ignore"):  # past float16's range is inf, as __float2half_rn
            h = np.array(a.astype(np.float16), order="C")
        return h, h.astype(np.float32)
    bits = _to_bfloat16_bits(a)
    return bits, _from_bfloat16_bits(bits)


def values_of(stored: np.ndarray, dtype: Any) -> np.ndarray:
    """The values a stored array holds, as `dtype` (float32 for the half types)."""
    if stored.dtype == np.float16:
        return stored.astype(np.float32)
    if stored.dtype == np.uint16 and dtype == np.float32:
        return _from_bfloat16_bits(stored)
    return stored


def _to_bfloat16_bits(a: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)


def _from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


class EmulatedCUDA:
    """A backend object: `CUDACompiler`'s plan (kiln/jit/backends/cuda/plan.build_plan) with NumPy in
    CuPy's place and the module's kernels run by the CPU emulation. It checks the plan's logic (which
    nodes become kernels, the launch arguments, the outputs' shapes and order), never a GPU."""

    name = "emulated-cuda"

    def __init__(self, directory: Path):
        self.directory = directory
        self.modules = 0

    def load(self, source: str) -> Any:
        lib = build_emulated(source, self.directory, f"plan_{self.modules}")
        self.modules += 1
        return _EmulatedFunctions(lib)

    def lower(self, graph: Any) -> Any:
        from kiln.jit.backends.cuda.plan import build_plan  # noqa: PLC0415

        return build_plan(graph, "float32", np, self.load, self.name)


class _EmulatedFunctions:
    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib

    def get_function(self, name: str) -> Any:
        fn = getattr(self.lib, f"emu_{name}")
        fn.restype = None

        def launch(grid: tuple, block: tuple, args: tuple) -> None:
            fn(*[ctypes.c_longlong(int(a)) if isinstance(a, (int, np.integer)) else ctypes.c_void_p(a.ctypes.data)
                 for a in args])

        return launch
