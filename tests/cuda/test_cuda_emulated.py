"""The rendered CUDA kernels compute what the CPU backend computes: every fused kernel of the
workloads, run under a CPU emulation of CUDA's execution model (tests/cuda/cuda_emulator.py:
a block of 256 host threads, barriers for __syncthreads, warp shuffles, IEEE half types), vs
the CPU's reference evaluation of the same group on the same (storage-rounded) inputs.

Not a GPU run: this checks the kernels' logic, not a GPU's behaviour (tests/cuda/test_cuda_gpu.py).
"""
from __future__ import annotations

import numpy as np
import pytest

from cuda_emulator import EmulatedModule, needs_cxx
from cuda_patterns import WORKLOADS, fused_kernels

pytestmark = needs_cxx

# storage -> (rtol, atol) of a kernel's output vs the reference on the same stored inputs, itself
# stored in that type (so values past float16's range are inf in both). The float math differs only
# in the order of a row's additions, which can move a stored half value by one unit in the last place
# (2**-10 relative for float16, 2**-7 for bfloat16).
TOLERANCE = {"float32": (1e-5, 1e-6), "float16": (2e-3, 1e-4), "bfloat16": (1.6e-2, 1e-3)}


def _inputs(values, rng) -> list[np.ndarray]:
    out = []
    for v in values:
        shape = tuple(v.shape)
        if v.dtype.name == "bool":
            out.append(rng.random(shape) < 0.5)
        else:
            magnitude = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
            out.append(np.asarray(magnitude, v.dtype.np))
    return out


@pytest.fixture(scope="module")
def kernels() -> list:
    return [k for name in WORKLOADS for k in fused_kernels(name)]


@pytest.mark.parametrize("storage", ["float32", "float16", "bfloat16"])
def test_every_fused_kernel_matches_the_cpu_reference(kernels, storage: str, tmp_path) -> None:
    module = EmulatedModule(kernels, storage, tmp_path)
    rng = np.random.default_rng(0)
    rtol, atol = TOLERANCE[storage]
    for k, kernel in enumerate(kernels):
        arrays = _inputs(kernel.group.inputs, rng)
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
