"""The rendered CUDA kernels compute what the CPU backend computes: every spelling of the renderer's
table vs the primitive's NumPy kernel, and every fused kernel of the workloads, run under a CPU emulation of CUDA's execution model (tests/cuda/cuda_emulator.py:
a block of 256 host threads, barriers for __syncthreads, warp shuffles, IEEE half types), vs
the CPU's reference evaluation of the same group on the same (storage-rounded) inputs.

Not a GPU run: this checks the kernels' logic, not a GPU's behaviour (tests/cuda/test_cuda_gpu.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import ctypes
import re

from kiln.jit.backends.cuda.language import CUDALanguage
from kiln.ops.primitive import REGISTRY
from tolerances import C_EXPR_ULPS

from cuda_emulator import EmulatedModule, build_emulated, needs_cxx, stored_as, values_of
from cuda_patterns import WORKLOADS, fused_kernels, kernel_inputs
from test_cuda_nvcc import primitive_kernels

pytestmark = needs_cxx

# storage -> (rtol, atol) of a kernel's output vs the reference on the same stored inputs, itself
# stored in that type (so values past float16's range are inf in both). The float math differs only
# in the order of a row's additions, which can move a stored half value by one unit in the last place
# (2**-10 relative for float16, 2**-7 for bfloat16).
TOLERANCE = {"float32": (1e-5, 1e-6), "float16": (2e-3, 1e-4), "bfloat16": (1.6e-2, 1e-3)}



@pytest.fixture(scope="module")
def kernels() -> list:
    return [k for name in WORKLOADS for k in fused_kernels(name)]


@pytest.mark.parametrize("storage", ["float32", "float16",
                                     pytest.param("bfloat16", marks=pytest.mark.slow)])  # its loads/stores: below
def test_every_fused_kernel_matches_the_cpu_reference(kernels, storage: str, tmp_path) -> None:
    module = EmulatedModule(kernels, storage, tmp_path)
    rng = np.random.default_rng(0)
    rtol, atol = TOLERANCE[storage]
    for k, kernel in enumerate(kernels):
        arrays = kernel_inputs(kernel.group.inputs, rng)
        got, rounded = module.run(k, arrays)
        want = kernel.evaluate(np, tuple(rounded))
        want = list(want) if isinstance(want, tuple) else [want]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            w = module.values(module.holder(np.asarray(w))[0], np.asarray(w).dtype)
            assert g.shape == w.shape, (kernel.name, g.shape, w.shape)
            finite = w[np.isfinite(w)] if w.dtype.kind == "f" else np.zeros(0)
            scale = max(1.0, float(np.max(np.abs(finite)))) if finite.size else 1.0
            np.testing.assert_allclose(g, w.astype(g.dtype), rtol=rtol, atol=atol * scale,
                                       err_msg=f"kernel {k}: {kernel.name} ({storage})")


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -2.5, 3.0], np.float32)
HALF_ULP = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def _reference(name: str, xs: list[np.ndarray]) -> np.ndarray:
    if name == "cast":
        return xs[0]
    if name == "where":
        return np.where(xs[0] != 0, xs[1], xs[2])
    return np.asarray(REGISTRY[name].kernel(np, *xs)).astype(np.float32)


@pytest.mark.parametrize("storage", ["float32", "float16", "bfloat16"])
def test_every_primitive_spelling_matches_its_numpy_kernel(storage: str, tmp_path) -> None:
    """Each table entry as a kernel (out[i] = op(in0[i], ...)) on special values and random ones, vs the
    primitive's NumPy kernel on the same stored inputs, stored the same way. float32: bit for bit except
    the transcendentals' measured ulp bounds; a half type: its own rounding of those, one unit at most."""
    lang = CUDALanguage(storage)
    lib = build_emulated("\n".join([lang.prelude, *primitive_kernels(lang, "float32", "prim")]), tmp_path,
                         f"prims_{storage}")
    rng = np.random.default_rng(2)
    for name, template in sorted(lang.ops.items()):
        arity = 1 + max(int(k) for k in re.findall(r"\{(\d)\}", template))
        grid = np.stack(np.meshgrid(*[SPECIALS] * arity, indexing="ij"), -1).reshape(-1, arity)
        noise = (rng.uniform(0.5, 2.0, (512, arity)) * rng.choice([-1.0, 1.0], (512, arity))).astype(np.float32)
        columns = np.concatenate([grid, noise]).T
        stored, rounded = zip(*[stored_as(np.ascontiguousarray(c), storage) for c in columns])
        out = stored_as(np.zeros(columns.shape[1], np.float32), storage)[0]
        fn = getattr(lib, f"emu_prim_{name}")
        fn.restype = None
        fn(ctypes.c_longlong(columns.shape[1]), ctypes.c_void_p(out.ctypes.data),
           *[ctypes.c_void_p(a.ctypes.data) for a in stored])
        got = values_of(out, np.float32)
        with np.errstate(all="ignore"):
            want = values_of(stored_as(_reference(name, list(rounded)), storage)[0], np.float32)
        ulps = C_EXPR_ULPS.get(name, {}).get("float32", 0)
        if storage == "float32":
            rtol = ulps * 2.0 ** -23
        else:
            rtol = HALF_ULP[storage] if ulps else 0.0
        np.testing.assert_allclose(got, want, rtol=rtol, atol=0, err_msg=f"{name} ({storage})")
