"""kiln.cuda and kiln.backends: the device-agnostic boilerplate of PyTorch scripts runs on every machine."""
from __future__ import annotations

import importlib.util

import pytest

import kiln
import kiln.backends.cudnn as cudnn

HAS_GPU = kiln.cuda.is_available()


def test_availability_is_consistent() -> None:
    if importlib.util.find_spec("cupy") is None:
        assert not kiln.cuda.is_available()
    assert kiln.cuda.is_available() == (kiln.cuda.device_count() > 0) == kiln.cuda_is_available()
    assert kiln.backends.mps.is_available() is False and kiln.backends.mps.is_built() is False
    assert kiln.backends.cudnn.is_available() is False and kiln.backends.mkldnn.is_available() is False
    assert kiln.backends.cuda.is_built() == HAS_GPU


def test_the_usual_device_line_picks_the_cpu_here() -> None:
    device = kiln.device("cuda" if kiln.cuda.is_available() else "mps" if kiln.backends.mps.is_available()
                         else "cpu")
    assert device.type == ("cuda" if HAS_GPU else "cpu")


@pytest.mark.skipif(HAS_GPU, reason="no-GPU behaviour: seeding a GPU seeds kiln's shared stream")
def test_cuda_seeding_without_a_gpu_leaves_the_cpu_stream_alone() -> None:
    kiln.manual_seed(7)
    state = kiln.get_rng_state()
    kiln.cuda.manual_seed_all(123)
    kiln.cuda.manual_seed(5)
    assert kiln.get_rng_state() == state
    with pytest.raises(TypeError, match="int seed"):
        kiln.cuda.manual_seed_all("seed")


@pytest.mark.skipif(HAS_GPU, reason="no-GPU behaviour: needs a machine without a GPU")
@pytest.mark.parametrize("call", ["current_device", "synchronize", "get_device_name"])
def test_gpu_only_calls_say_no_gpu_is_available(call: str) -> None:
    with pytest.raises(RuntimeError, match="guard the call with kiln.cuda.is_available"):
        getattr(kiln.cuda, call)()


def test_calls_that_are_no_ops_without_a_gpu() -> None:
    kiln.cuda.empty_cache()
    assert kiln.cuda.is_bf16_supported() is False


def test_backend_flags_are_stored() -> None:
    saved = (cudnn.benchmark, cudnn.deterministic, kiln.backends.cuda.matmul.allow_tf32)
    try:
        kiln.backends.cudnn.benchmark = True
        kiln.backends.cudnn.deterministic = True
        kiln.backends.cuda.matmul.allow_tf32 = True
        assert cudnn.benchmark and cudnn.deterministic and kiln.backends.cuda.matmul.allow_tf32
        with cudnn.flags(enabled=False, benchmark=False):
            assert not cudnn.enabled and not cudnn.benchmark
        assert cudnn.enabled and cudnn.benchmark
        kiln.backends.cuda.enable_flash_sdp(False)
        assert not kiln.backends.cuda.flash_sdp_enabled()
        kiln.backends.cuda.enable_flash_sdp(True)
    finally:
        cudnn.benchmark, cudnn.deterministic, kiln.backends.cuda.matmul.allow_tf32 = saved


def test_precision_and_determinism_switches() -> None:
    torch = pytest.importorskip("torch")
    assert kiln.get_float32_matmul_precision() == torch.get_float32_matmul_precision() == "highest"
    try:
        kiln.set_float32_matmul_precision("high")
        assert kiln.get_float32_matmul_precision() == "high"
        with pytest.raises(ValueError, match="highest"):
            kiln.set_float32_matmul_precision("fast")
        kiln.use_deterministic_algorithms(True)
        assert kiln.are_deterministic_algorithms_enabled()
    finally:
        kiln.set_float32_matmul_precision("highest")
        kiln.use_deterministic_algorithms(False)
    a = kiln.randn(64, 64)
    assert (a @ a).tolist() == (a @ a).tolist()
