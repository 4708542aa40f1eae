"""Layers refuse an input whose dtype differs from their weight's, as PyTorch does (no silent float64 math)."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.dtypes import DTypeMismatchError

torch = pytest.importorskip("torch")


def _layers():
    kiln.manual_seed(0)
    return [
        ("linear", nn.Linear(4, 3), torch.nn.Linear(4, 3), (2, 4)),
        ("conv2d", nn.Conv2d(1, 2, 3), torch.nn.Conv2d(1, 2, 3), (1, 1, 5, 5)),
        ("conv1d", nn.Conv1d(2, 2, 3), torch.nn.Conv1d(2, 2, 3), (1, 2, 6)),
    ]


@pytest.mark.parametrize("index", [0, 1, 2])
@pytest.mark.parametrize("input_dtype", ["float64", "int64"])
def test_a_float32_layer_refuses_other_dtypes_like_torch(index: int, input_dtype: str) -> None:
    op, ours, theirs, shape = _layers()[index]
    data = np.ones(shape, dtype=input_dtype)
    with pytest.raises(RuntimeError):
        theirs(torch.from_numpy(data))
    for x in (data, kiln.tensor(data)):  # a NumPy array or a tensor
        with pytest.raises(DTypeMismatchError, match=f"{op}: the input is {input_dtype} but the weight is float32"):
            ours(x)
    with pytest.raises(TypeError, match="x.to\\(kiln.float32\\)"):
        ours(data)


def test_the_error_is_raised_under_compile_too() -> None:
    model = nn.Linear(4, 3)
    compiled = kiln.compile(model)
    with pytest.raises(DTypeMismatchError, match="float64"):
        compiled(kiln.ones(2, 4, dtype=kiln.float64))


def test_a_bias_of_another_dtype_is_refused() -> None:
    with pytest.raises(DTypeMismatchError, match="the bias is float64 but the weight is float32"):
        F.linear(kiln.ones(2, 4), kiln.ones(3, 4), kiln.ones(3, dtype=kiln.float64))
    with pytest.raises(RuntimeError):
        torch.nn.functional.linear(torch.ones(2, 4), torch.ones(3, 4), torch.ones(3, dtype=torch.float64))


def test_matching_dtypes_work_and_match_torch() -> None:
    kiln.manual_seed(0)
    ours = nn.Linear(4, 3).double()
    theirs = torch.nn.Linear(4, 3).double()
    with torch.no_grad():
        theirs.weight.copy_(torch.from_numpy(ours.weight.detach().numpy()))
        theirs.bias.copy_(torch.from_numpy(ours.bias.detach().numpy()))
    data = np.random.default_rng(0).standard_normal((2, 4))
    np.testing.assert_allclose(ours(data).detach().numpy(), theirs(torch.from_numpy(data)).detach().numpy(),
                               rtol=1e-12)
    assert nn.Linear(2, 1)(np.ones((1, 2), dtype=np.float32)).dtype == kiln.float32
    assert nn.Linear(2, 1)([[1.0, 2.0]]).dtype == kiln.float32  # Python floats become float32, as kiln.tensor


def test_bilinear_checks_both_inputs() -> None:
    layer = nn.Bilinear(2, 3, 4)
    with pytest.raises(DTypeMismatchError, match="bilinear"):
        layer(kiln.ones(1, 2), kiln.ones(1, 3, dtype=kiln.float64))


def test_the_error_is_exported_and_catchable_as_torchs_runtime_error() -> None:
    assert kiln.DTypeMismatchError is DTypeMismatchError
    assert issubclass(DTypeMismatchError, RuntimeError) and issubclass(DTypeMismatchError, TypeError)
