"""Device plumbing for CUDA that is checkable on any machine: names, the array-module seam,
errors for a missing GPU and for mixed devices, auto_device, and the CUDACompiler object.

Tests marked `gpu` need CuPy and an NVIDIA GPU and skip cleanly elsewhere.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln.device import (Device, DeviceMismatchError, DeviceUnavailableError, array_module, array_module_of,
                         check_same_device, get_device)
from kiln.jit.backends.cuda import CUDACompiler

HAS_GPU = kiln.cuda.is_available()
gpu = pytest.mark.skipif(not HAS_GPU, reason="needs CuPy and an NVIDIA GPU")
no_gpu = pytest.mark.skipif(HAS_GPU, reason="no-GPU behaviour: checks a machine without a GPU")


def _claiming(device: str, values: list[float]) -> kiln.Tensor:
    """A tensor that says it lives on `device` (its data stays a NumPy array): enough to test checks
    that look at devices before any kernel runs."""
    return kiln.Tensor._wrap(np.asarray(values, np.float32), Device(*device.split(":")[:1]))


def test_gpu_is_an_alias_of_cuda() -> None:
    from kiln.device import _parse  # noqa: PLC0415 - parsing alone needs no GPU

    assert _parse("gpu") == Device("cuda") and str(_parse("gpu")) == "cuda"
    assert _parse("gpu:1") == Device("cuda", 1) and str(_parse("gpu:1")) == "cuda:1"


def test_the_cpu_is_served_by_numpy() -> None:
    assert array_module("cpu") is np and array_module(kiln.device("cpu")) is np and array_module(None) is np
    assert array_module_of(np.zeros(2)) is np
    assert kiln.ones(2).device.xp is np


@no_gpu
@pytest.mark.parametrize("spec", ["cuda", "gpu", "cuda:0"])
def test_asking_for_a_gpu_without_one_says_what_is_missing_and_the_fix(spec: str) -> None:
    for call in (lambda: kiln.ones(2).to(spec), lambda: kiln.zeros(2, device=spec), lambda: array_module(spec),
                 lambda: nn.Linear(2, 3).to(spec)):
        with pytest.raises(DeviceUnavailableError, match=r"needs an NVIDIA GPU through CuPy, and .*use device='cpu'"):
            call()
    with pytest.raises(RuntimeError):  # also a RuntimeError, as PyTorch's "no CUDA" error
        kiln.ones(2).cuda()
    with pytest.raises(RuntimeError, match="CuPy"):
        nn.Linear(2, 3).cuda()


@no_gpu
def test_without_a_gpu_the_counts_agree() -> None:
    assert kiln.cuda.device_count() == 0 and not kiln.cuda.is_available()
    with pytest.raises(RuntimeError, match="guard the call"):
        kiln.cuda.synchronize()


@pytest.mark.parametrize("make", [
    lambda a, b: a + b, lambda a, b: a * b, lambda a, b: b - a, lambda a, b: kiln.maximum(a, b),
    lambda a, b: kiln.where(kiln.ones(3) > 0, a, b), lambda a, b: kiln.cat([a, b]), lambda a, b: kiln.minimum(a, b),
])
def test_one_op_on_two_devices_names_both(make) -> None:
    cpu, cuda = kiln.tensor([1.0, 2.0, 3.0]), _claiming("cuda", [4.0, 5.0, 6.0])
    for a, b in ((cpu, cuda), (cuda, cpu)):
        with pytest.raises(DeviceMismatchError, match=r"expected all tensors on one device, got one on (cpu|cuda) "
                                                      r"and one on (cuda|cpu); move them"):
            make(a, b)


def test_check_same_device_accepts_one_device() -> None:
    check_same_device("add", [kiln.ones(2), kiln.zeros(2), kiln.ones(1)])
    check_same_device("add", [_claiming("cuda", [1.0]), _claiming("cuda", [2.0])])
    with pytest.raises(DeviceMismatchError, match="cat: .*cpu.*cuda"):
        check_same_device("cat", [kiln.ones(2), _claiming("cuda", [1.0])])


def test_auto_device_is_validated_and_a_no_op_without_a_gpu() -> None:
    for bad in ("yes", 1, None):
        with pytest.raises(TypeError, match="auto_device must be True or False"):
            kiln.compile(lambda x: x, auto_device=bad)
        with pytest.raises(TypeError, match="auto_device must be True or False"):
            kiln.jit(lambda x: x, auto_device=bad)

    def f(x, scale):
        return (x * scale["s"]).relu().sum(axis=-1)

    x, s = kiln.randn(4, 8), kiln.tensor(2.0)
    expected = f(x, {"s": s}).numpy()
    for compiled in (kiln.compile(f, auto_device=True), kiln.jit(f), kiln.djit(f)):
        out = compiled(x, {"s": s})
        if HAS_GPU:  # the GPU sums in another order: within float32 rounding of the CPU
            np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(out.numpy(), expected)
        assert out.device == (kiln.device("cuda") if HAS_GPU else kiln.device("cpu"))
    model = kiln.compile(nn.Linear(8, 3), auto_device=True)
    if not HAS_GPU:
        np.testing.assert_array_equal(model(x).detach().numpy(), model.module(x).detach().numpy())


def test_cuda_compiler_validates_its_arguments() -> None:
    assert CUDACompiler().dtype == "float32"
    assert CUDACompiler(dtype="half").dtype == "float16" and CUDACompiler(dtype=kiln.float16).dtype == "float16"
    assert CUDACompiler(dtype="bf16").dtype == "bfloat16" and CUDACompiler("bfloat16").name == "cuda[bfloat16]"
    assert CUDACompiler("float16", arch="sm_90").name == "cuda[float16,sm_90]"
    assert CUDACompiler("float16") == CUDACompiler("half") and CUDACompiler("float16") != CUDACompiler("float32")
    assert repr(CUDACompiler("float16", arch="sm_80")) == "CUDACompiler(dtype='float16', arch='sm_80')"
    with pytest.raises(ValueError, match=r"expects one of \['float32', 'float16', 'bfloat16'\], got 'float64'"):
        CUDACompiler("float64")
    with pytest.raises(ValueError, match="got kiln.int32"):
        CUDACompiler(kiln.int32)
    with pytest.raises(TypeError, match="expects a dtype name"):
        CUDACompiler(16)
    for arch in ("90", "sm90", "compute_90", 90):
        with pytest.raises(ValueError, match="arch=.*'sm_80'"):
            CUDACompiler(arch=arch)


def test_a_backend_that_is_neither_a_name_nor_an_object_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown backend 42: expected one of .* or a backend object"):
        kiln.compile(lambda x: x, backend=42)
    with pytest.raises(ValueError, match="unknown backend 'cuda'"):
        kiln.compile(lambda x: x, backend="cuda")


@no_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_compiling_for_cuda_without_a_gpu_raises_at_compile_time(dtype: str) -> None:
    with pytest.raises(DeviceUnavailableError, match=rf"backend=CUDACompiler\(dtype='{dtype}'\) compiles for an "
                                                     r"NVIDIA GPU.*use backend='auto'"):
        kiln.compile(nn.Linear(2, 2), backend=CUDACompiler(dtype))
    with pytest.raises(DeviceUnavailableError):
        CUDACompiler(dtype).lower(None)


def test_a_transfer_is_a_copy_that_carries_the_gradient_back() -> None:
    from kiln.ops.device_copy import transfer  # noqa: PLC0415 - the CPU-to-CPU case runs the same autograd node

    x = kiln.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = transfer(x, get_device("cpu"))
    assert y is not x and y.requires_grad and y.grad_fn is not None
    assert not np.shares_memory(y._data, x._data)
    (y * kiln.tensor([2.0, 3.0, 4.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 3.0, 4.0])
    with kiln.no_grad():
        assert transfer(x, get_device("cpu")).grad_fn is None


def test_a_graph_on_the_gpu_goes_to_cuda_under_auto_and_is_refused_by_cpu_backends() -> None:
    from kiln.jit.backends import get_backend  # noqa: PLC0415
    from kiln.jit.ir import Value  # noqa: PLC0415

    class GPUGraph:  # what a lowering reads first: the inputs and their devices
        inputs = [Value((2, 3), kiln.float32, Device("cuda"))]

    for name in ("cpu", "interpret"):
        with pytest.raises(RuntimeError, match=f"backend='{name}' compiles for the CPU, and this call's inputs are "
                                               "on the GPU; use backend='auto' or backend=CUDACompiler"):
            get_backend(name)[1](GPUGraph())
    if not HAS_GPU:
        with pytest.raises(DeviceUnavailableError, match=r"backend=CUDACompiler\(dtype='float32'\)"):
            get_backend("auto")[1](GPUGraph())


def test_moving_inside_a_compiled_function_is_refused_with_the_fix() -> None:
    @kiln.compile(fullgraph=True)
    def f(x):
        return x.to(Device("cuda")) * 2

    with pytest.raises(RuntimeError, match="inside a compiled function is not supported.*move the inputs"):
        f(kiln.ones(2))


# ---- on a GPU -------------------------------------------------------------------------------
@gpu
def test_round_trip_and_gradient_across_devices() -> None:
    x = kiln.randn(3, 4, requires_grad=True)
    y = x.to("gpu")
    assert y.device == kiln.device("cuda") and y.is_cuda and array_module_of(y._data) is get_device("cuda").xp
    (y * y).sum().backward()
    assert x.grad.device.type == "cpu"
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.detach().numpy(), rtol=1e-6)
    kiln.cuda.synchronize()
    assert kiln.cuda.device_count() >= 1


@gpu
def test_a_model_moves_and_trains_on_the_gpu() -> None:
    kiln.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    gpu_model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    gpu_model.load_state_dict(cpu_model.state_dict())
    gpu_model.to("cuda")
    assert all(p.device.type == "cuda" for p in gpu_model.parameters())
    x = kiln.randn(5, 8)
    for model, inp in ((cpu_model, x), (gpu_model, x.cuda())):
        model(inp).square().mean().backward()
    for p, q in zip(cpu_model.parameters(), gpu_model.parameters()):
        np.testing.assert_allclose(q.grad.cpu().numpy(), p.grad.numpy(), rtol=1e-4, atol=1e-6)


@gpu
def test_one_op_on_real_cpu_and_gpu_tensors_names_both() -> None:
    with pytest.raises(DeviceMismatchError, match="cpu.*cuda"):
        kiln.ones(2) + kiln.ones(2).cuda()
