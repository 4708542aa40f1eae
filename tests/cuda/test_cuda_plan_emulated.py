"""CUDACompiler's plan logic (kiln/jit/backends/cuda/plan.py) on the CPU: the same build_plan, with
NumPy in CuPy's place and the CUDA module's kernels run by the CPU emulation of CUDA
(tests/cuda/cuda_emulator.py), compiled through kiln.compile and compared with the CPU backend:
each workload's loss and gradients, and 20 compiled training steps of an MLP (the emulation runs
each block's threads on this machine's cores, so it is kept small; the GPU test runs 50).

This is not a GPU run (CuPy, NVRTC, launches and memory are untested): docs/cuda.md.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.jit.backends.cpu.codegen import FusedElementwise
from kiln.jit.backends.cpu.rowcode import RowKernel
from kiln.jit.backends.cuda.plan import CUDAKernel
from tolerances import tol

from cuda_emulator import EmulatedCUDA, needs_cxx
from cuda_patterns import on_device

pytestmark = needs_cxx


def _run(name: str, backend) -> list[np.ndarray]:
    kiln.manual_seed(0)
    fn, args = on_device(name, "cpu")
    compiled = kiln.compile(fn, backend=backend)
    loss = compiled(*args)
    loss.backward()
    return [loss.detach().numpy()] + [a.grad.numpy() for a in args if a.requires_grad], compiled


@pytest.mark.parametrize("workload", ["gpt_block", *[pytest.param(name, marks=pytest.mark.slow) for name in
                                                     ("layernorm_gelu", "cross_entropy", "attention")]])
def test_a_workload_compiled_for_cuda_matches_the_cpu_backend(workload: str, tmp_path) -> None:
    emulated = EmulatedCUDA(tmp_path)
    got, compiled = _run(workload, emulated)
    want, _ = _run(workload, "interpret")
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, **tol("float32", "grad"))
    entry = compiled.cache_entries[0]
    plans = [entry.plan] if hasattr(entry, "plan") else [entry.forward_plan, entry.backward_plan]
    prims = [n.prim for p in plans for n in p.graph.nodes]
    assert any(isinstance(p, CUDAKernel) and p.rows for p in prims)  # row kernels ran as CUDA kernels
    assert not any(isinstance(p, (FusedElementwise, RowKernel)) for p in prims)  # no C kernel is left
    assert emulated.modules == len(plans)  # one module per plan


def test_twenty_compiled_mlp_training_steps_match_the_cpu_backend(tmp_path) -> None:
    losses = {}
    for label, backend in (("cpu", "interpret"), ("cuda-emulated", EmulatedCUDA(tmp_path))):
        kiln.manual_seed(0)
        model = kiln.models.mlp(32, (64,), 10)
        opt = kiln.optim.SGD(model.parameters(), lr=0.1)
        rng = np.random.default_rng(0)
        x, y = kiln.tensor(rng.standard_normal((16, 32), np.float32)), kiln.tensor(rng.integers(0, 10, 16))

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        compiled = kiln.compile(step, backend=backend)
        losses[label] = np.array([float(compiled(x, y).item()) for _ in range(20)])
    np.testing.assert_allclose(losses["cuda-emulated"], losses["cpu"], rtol=1e-4, atol=1e-5)
    assert losses["cpu"][-1] < 0.7 * losses["cpu"][0]  # it trains


class _DeviceArray(np.ndarray):
    """Marks an array as moved by `_Device.asarray`."""


class _Device:
    """Stands in for CuPy: asarray "moves" an array to the device."""

    @staticmethod
    def asarray(a):
        return np.asarray(a).view(_DeviceArray)


def test_a_cuda_plan_puts_host_literals_on_the_device() -> None:
    from types import SimpleNamespace  # noqa: PLC0415

    from kiln.jit.backends.cuda.plan import move_literals  # noqa: PLC0415
    from kiln.jit.ir import InputSpec  # noqa: PLC0415

    folded = InputSpec("literal", literal=np.arange(3, dtype=np.float32))
    scalar = InputSpec("literal", literal=np.float32(2.0))
    arg = InputSpec("arg", 0)
    specs = [folded, scalar, arg]
    with_bfloat16 = importlib.util.find_spec("ml_dtypes") is not None  # the optional kiln[bfloat16]
    if with_bfloat16:
        half = InputSpec("literal", literal=np.ones(2, kiln.bfloat16.np))
        specs.append(half)
    move_literals(SimpleNamespace(specs=specs), _Device)
    assert isinstance(folded.literal, _DeviceArray) and folded.literal.tolist() == [0.0, 1.0, 2.0]
    assert isinstance(scalar.literal, _DeviceArray) and float(scalar.literal) == 2.0
    assert arg.literal is None
    if with_bfloat16:
        assert not isinstance(half.literal, _DeviceArray)  # CuPy holds no bfloat16: it stays on the host
