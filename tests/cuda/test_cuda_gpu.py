"""On a GPU: the CUDA backend against the CPU backend, its oracle.

* every spelling of the renderer's table, launched as a kernel, vs the primitive's NumPy kernel;
* every fused kernel of the workloads (tests/cuda/cuda_patterns.py), in float32, float16 and
  bfloat16 storage, vs the CPU's reference evaluation of the same group;
* whole workloads compiled with CUDACompiler(dtype="float32"), loss and gradients vs the CPU backend;
* MLP, LeNet-5 and GPT training for 50 steps, losses vs the CPU backend.

These tests need CuPy and an NVIDIA GPU and skip cleanly elsewhere. They were written on a machine
without a GPU and have NEVER RUN (see docs/cuda.md): expect to debug them on the first GPU.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.ops.primitive import REGISTRY
from tolerances import C_EXPR_ULPS, tol

from cuda_patterns import WORKLOADS, fused_kernels, kernel_inputs, on_device

pytestmark = pytest.mark.skipif(not kiln.cuda.is_available(), reason="needs CuPy and an NVIDIA GPU")

# storage dtype -> (rtol, atol) of a GPU result vs the CPU's float32 result on the same rounded inputs
HALF_TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}


def _cupy():
    import cupy  # noqa: PLC0415

    return cupy


def _module(source: str):
    from kiln.jit.backends.cuda.plan import load_module  # noqa: PLC0415

    return load_module(source, _cupy())


def _to_storage(a: np.ndarray, storage: str, size: int):
    """Host array -> (device array in the kernel's storage, the float32 values it holds)."""
    cupy = _cupy()
    if a.dtype != np.float32 or storage == "float32" or size == 1:
        return cupy.asarray(a), a
    if storage == "float16":
        h = a.astype(np.float16)
        return cupy.asarray(h), h.astype(np.float32)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    b = a.astype(ml_dtypes.bfloat16)
    return cupy.asarray(b.view(np.uint16)), b.astype(np.float32)


def _from_storage(d, storage: str, size: int, dtype) -> np.ndarray:
    h = d.get()
    if dtype != np.float32 or storage == "float32" or size == 1:
        return h
    if storage == "float16":
        return h.astype(np.float32)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return h.view(ml_dtypes.bfloat16).astype(np.float32)



@pytest.mark.parametrize("storage", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_each_fused_kernel_matches_the_cpu_reference(workload: str, storage: str) -> None:
    from kiln.jit.backends.cuda.kernels import BLOCK, render_module  # noqa: PLC0415
    from kiln.jit.backends.cuda.language import CUDALanguage  # noqa: PLC0415

    cupy = _cupy()
    kernels = fused_kernels(workload)
    source, names = render_module(kernels, CUDALanguage(storage))
    module = _module(source)
    rng = np.random.default_rng(0)
    for k, name in zip(kernels, names):
        group = k.group
        ins = group.inputs
        outs = getattr(group, "outputs", None) or [group.root.out]
        host = kernel_inputs(ins, rng)
        dev, rounded = zip(*[_to_storage(a, storage, a.size) for a in host]) if host else ((), ())
        want = k.evaluate(np, tuple(rounded))
        want = list(want) if isinstance(want, tuple) else [want]
        got_dev = []
        for v in outs:
            size = int(np.prod(v.shape))
            holder = np.empty(tuple(v.shape), v.dtype.np)
            got_dev.append(_to_storage(holder, storage, size)[0])
        if hasattr(group, "space"):
            outer, inner, grid = group.space.outer, group.space.inner, max(1, min(group.space.outer, 65535))
        else:
            shape = tuple(group.root.out.shape)
            outer, inner = int(np.prod(shape[:k.split])), int(np.prod(shape[k.split:]))
            grid = max(1, min((outer * inner + BLOCK - 1) // BLOCK, 65535))
        module.get_function(name)((grid,), (BLOCK,), (np.int64(outer), np.int64(inner), *got_dev,
                                                      *[cupy.ascontiguousarray(d) for d in dev]))
        for v, d, w in zip(outs, got_dev, want):
            got = _from_storage(d, storage, int(np.prod(v.shape)), v.dtype.np)
            rtol, atol = tol("float32").values() if storage == "float32" else HALF_TOL[storage]
            np.testing.assert_allclose(got, np.asarray(w, dtype=got.dtype), rtol=rtol * 10, atol=atol * 10,
                                       err_msg=f"{workload} {k.name} ({storage})")


@pytest.mark.parametrize("storage", ["float32", "float16"])
def test_each_primitive_spelling_matches_numpy(storage: str) -> None:
    from kiln.jit.backends.cuda.kernels import BLOCK  # noqa: PLC0415
    from kiln.jit.backends.cuda.language import CUDALanguage  # noqa: PLC0415
    from test_cuda_nvcc import primitive_kernels  # noqa: PLC0415

    lang = CUDALanguage(storage)
    module = _module("\n".join([lang.prelude, *primitive_kernels(lang, "float32", "prim")]))
    rng = np.random.default_rng(1)
    n = 4096
    for name, template in sorted(lang.ops.items()):
        arity = 1 + max(int(k) for k in re.findall(r"\{(\d)\}", template))
        host = [(rng.uniform(0.5, 2.0, n) * rng.choice([-1, 1], n)).astype(np.float32) for _ in range(arity)]
        dev, rounded = zip(*[_to_storage(a, storage, n) for a in host])
        out = _to_storage(np.empty(n, np.float32), storage, n)[0]
        module.get_function(f"prim_{name}")(((n + BLOCK - 1) // BLOCK,), (BLOCK,), (np.int64(n), out, *dev))
        if name == "cast":
            want = rounded[0]
        elif name == "where":
            want = np.where(rounded[0] != 0, rounded[1], rounded[2])
        else:
            want = REGISTRY[name].kernel(np, *rounded)
        got = _from_storage(out, storage, n, np.float32)
        ulps = C_EXPR_ULPS.get(name, {}).get("float32", 1)
        rtol, atol = (2e-6 * ulps, 1e-6) if storage == "float32" else HALF_TOL[storage]
        np.testing.assert_allclose(got, np.asarray(want, np.float32), rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_compiled_workloads_match_the_cpu_backend(workload: str) -> None:
    from kiln.jit.backends.cuda import CUDACompiler  # noqa: PLC0415

    results = []
    for device, backend in (("cpu", "cpu"), ("cuda", CUDACompiler("float32"))):
        kiln.manual_seed(0)
        fn, args = on_device(workload, device)
        loss = kiln.compile(fn, backend=backend)(*args)
        loss.backward()
        results.append([loss.detach().cpu().numpy()] + [a.grad.cpu().numpy() for a in args if a.requires_grad])
    for cpu, gpu in zip(*results):
        np.testing.assert_allclose(gpu, cpu, **tol("float32", "grad"))


def _model(name: str) -> tuple[nn.Module, object, object]:
    kiln.manual_seed(0)
    rng = np.random.default_rng(0)
    if name == "mlp":
        return kiln.models.mlp(64, (32,), 10), kiln.tensor(rng.standard_normal((32, 64), np.float32)), \
            kiln.tensor(rng.integers(0, 10, 32))
    if name == "lenet_5":
        return kiln.models.lenet_5(), kiln.tensor(rng.standard_normal((8, 1, 32, 32), np.float32)), \
            kiln.tensor(rng.integers(0, 10, 8))
    model = kiln.models.gpt(vocab=50, n_layer=2, n_head=2, d_model=32, block_size=16)
    tokens = rng.integers(0, 50, (4, 17))
    return model, kiln.tensor(tokens[:, :-1]), kiln.tensor(tokens[:, 1:])


@pytest.mark.parametrize("name", ["mlp", "lenet_5", "gpt"])
def test_fifty_training_steps_match_the_cpu_backend(name: str) -> None:
    from kiln.jit.backends.cuda import CUDACompiler  # noqa: PLC0415

    losses = {}
    for device, backend in (("cpu", "cpu"), ("cuda", CUDACompiler("float32"))):
        model, x, y = _model(name)
        model.to(device)
        x, y = x.to(device), y.to(device)
        opt = kiln.optim.SGD(model.parameters(), lr=0.05)

        def step(x, y):
            opt.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
            return loss

        compiled = kiln.compile(step, backend=backend)
        losses[device] = np.array([float(compiled(x, y).item()) for _ in range(50)])
    np.testing.assert_allclose(losses["cuda"], losses["cpu"], rtol=1e-3, atol=1e-4)
    assert losses["cuda"][-1] < losses["cuda"][0]


def test_auto_backend_lowers_gpu_inputs_for_cuda_and_explain_says_so() -> None:
    fn, args = on_device("softmax", "cuda")
    compiled = kiln.compile(fn)  # backend="auto"
    want = fn(*args).detach().cpu().numpy()
    np.testing.assert_allclose(compiled(*args).detach().cpu().numpy(), want, **tol("float32", "grad"))
    assert "plan (cuda[float32])" in compiled.explain()
