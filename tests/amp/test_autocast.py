"""autocast: PyTorch's region API and state; in kiln it casts nothing, eager or compiled."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.amp import get_autocast_dtype, is_autocast_enabled

torch = pytest.importorskip("torch")


def test_region_state_follows_torch() -> None:
    assert kiln.autocast is kiln.amp.autocast
    assert is_autocast_enabled("cpu") == torch.is_autocast_enabled("cpu") is False
    assert get_autocast_dtype("cpu").name == str(torch.get_autocast_dtype("cpu")).replace("torch.", "")
    with kiln.autocast("cpu"), torch.autocast("cpu"):
        assert is_autocast_enabled("cpu") and torch.is_autocast_enabled("cpu")
        assert get_autocast_dtype("cpu").name == "bfloat16" == str(torch.get_autocast_dtype("cpu"))[6:]
        with kiln.autocast("cpu", enabled=False), torch.autocast("cpu", enabled=False):
            assert not is_autocast_enabled("cpu") and not torch.is_autocast_enabled("cpu")
        with kiln.autocast("cpu", dtype=kiln.float16), torch.autocast("cpu", dtype=torch.float16):
            assert get_autocast_dtype("cpu").name == "float16" == str(torch.get_autocast_dtype("cpu"))[6:]
        assert is_autocast_enabled("cpu")
    assert not is_autocast_enabled("cpu")


def test_region_is_left_on_an_exception() -> None:
    with pytest.raises(ZeroDivisionError):
        with kiln.autocast("cpu"):
            1 / 0
    assert not is_autocast_enabled("cpu")


def test_decorator_form() -> None:
    @kiln.autocast("cpu")
    def inside() -> bool:
        return is_autocast_enabled("cpu")

    assert inside() and not is_autocast_enabled("cpu")


def _model() -> nn.Module:
    kiln.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 3))


@pytest.mark.parametrize("enabled", [True, False])
def test_results_and_grads_equal_those_without_autocast_eager_and_compiled(enabled: bool) -> None:
    x, y = kiln.randn(5, 6), kiln.tensor([0, 2, 1, 1, 0])
    reference_model = _model()
    ref_loss = F.cross_entropy(reference_model(x), y)
    ref_loss.backward()
    for compiled in (False, True):
        model = _model()
        run = kiln.compile(model) if compiled else model
        with kiln.autocast(device_type="cpu", dtype=kiln.bfloat16, enabled=enabled):
            loss = F.cross_entropy(run(x), y)
        assert loss.dtype == kiln.float32
        loss.backward()
        np.testing.assert_allclose(loss.item(), ref_loss.item(), rtol=1e-6)
        for p, q in zip(model.parameters(), reference_model.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_cuda_region_without_a_gpu_warns_and_is_disabled_like_torch() -> None:
    if kiln.cuda.is_available():
        pytest.skip("a GPU is available here")
    with pytest.warns(UserWarning, match="CUDA is not available"):
        region = kiln.autocast("cuda")
    with region:
        assert not is_autocast_enabled("cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with kiln.autocast("cuda", enabled=False), kiln.cuda.amp.autocast(enabled=False):
            pass


def test_unsupported_dtype_warns_and_disables() -> None:
    with pytest.warns(UserWarning, match="float32 is not supported"):
        region = kiln.autocast("cpu", dtype=kiln.float32)
    with region:
        assert not is_autocast_enabled("cpu")


@pytest.mark.parametrize("make, exc, message", [
    (lambda: kiln.autocast(kiln.device("cpu")), TypeError, "device_type as a str"),
    (lambda: kiln.autocast("tpu"), ValueError, "unknown device_type 'tpu'"),
    (lambda: kiln.autocast("cpu", enabled="yes"), TypeError, "enabled to be a bool"),
    (lambda: kiln.autocast("cpu", dtype="complex64"), TypeError, "unknown dtype"),
])
def test_bad_arguments(make, exc, message) -> None:
    with pytest.raises(exc, match=message):
        make()
