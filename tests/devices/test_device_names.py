"""Device names in .to(...) and device=: unsupported ones are named in the error (never "unknown dtype")."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn as nn

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", ["mps", "xpu", "xla", "meta", "mps:0"])
def test_a_device_kiln_does_not_run_on_is_named(name: str) -> None:
    base = name.split(":")[0]
    with pytest.raises(RuntimeError, match=f"device '{name}' is not supported.*not on .*use device='cpu'"):
        nn.Linear(2, 3).to(name)
    with pytest.raises(RuntimeError, match=f"device '{name}'"):
        kiln.zeros(2).to(name)
    with pytest.raises(RuntimeError, match=f"device '{base}'"):
        kiln.zeros(2, device=base)


@pytest.mark.parametrize("name", ["gpux", "cuda:x", "cpux", "gpu:y"])
def test_an_unknown_device_is_a_value_error_naming_it(name: str) -> None:
    with pytest.raises(ValueError, match=f"unknown device '{name}'"):
        nn.Linear(2, 3).to(name)
    with pytest.raises(ValueError, match=f"unknown device '{name}'"):
        kiln.ones(2).to(name)


def test_dtype_and_device_arguments_still_work() -> None:
    m = nn.Linear(2, 3).to("float64")
    assert m.weight.dtype == kiln.float64
    assert m.to("cpu").weight.device == kiln.device("cpu")
    x = kiln.ones(2).to("cpu", "float64")
    assert x.dtype == kiln.float64 and x.device.type == "cpu"
    assert kiln.ones(2).to(torch.device("cpu")).device.type == "cpu"
    assert kiln.ones(2).to(torch.float16).dtype == kiln.float16
    assert kiln.ones(2).to(device=torch.device("cpu"), dtype=torch.float64).dtype == kiln.float64
    np.testing.assert_array_equal(m.to(kiln.device("cpu")).weight.detach().numpy().shape, (3, 2))


def test_cuda_without_a_gpu_says_how_to_get_one() -> None:
    if kiln.cuda.is_available():
        pytest.skip("no-GPU behaviour: a GPU is available here")
    with pytest.raises(RuntimeError, match="CuPy"):
        nn.Linear(2, 3).to("cuda")
