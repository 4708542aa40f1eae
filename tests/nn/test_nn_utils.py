"""kiln.nn.utils: gradient clipping and parameter <-> vector conversion, against PyTorch."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from nn_parity import assert_close, copy_weights

torch = pytest.importorskip("torch")


def _models_with_grads():
    kmod, tmod = nn.Linear(5, 3).double(), torch.nn.Linear(5, 3).double()
    copy_weights(kmod, tmod)
    x = np.random.default_rng(0).standard_normal((4, 5)) * 10
    (kmod(kiln.tensor(x)) ** 2).sum().backward()
    (tmod(torch.tensor(x)) ** 2).sum().backward()
    return kmod, tmod


@pytest.mark.parametrize("max_norm,norm_type", [(1.0, 2.0), (1e6, 2.0), (0.5, 1.0), (0.3, float("inf"))])
def test_clip_grad_norm_matches_pytorch(max_norm, norm_type):
    kmod, tmod = _models_with_grads()
    k_total = nn.utils.clip_grad_norm_(kmod.parameters(), max_norm, norm_type)
    t_total = torch.nn.utils.clip_grad_norm_(tmod.parameters(), max_norm, norm_type)
    assert_close(k_total, t_total, "float64")
    for (name, kp), tp in zip(kmod.named_parameters(), tmod.parameters()):
        assert_close(kp.grad, tp.grad, "float64", "grad", name)


def test_clip_grad_norm_nonfinite_and_empty():
    p = nn.Parameter(kiln.ones(2))
    assert nn.utils.clip_grad_norm_([p], 1.0).item() == 0.0
    p.grad = kiln.tensor([float("inf"), 1.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_(p, 1.0, error_if_nonfinite=True)


def test_clip_grad_value():
    kmod, tmod = _models_with_grads()
    nn.utils.clip_grad_value_(kmod.parameters(), 0.5)
    torch.nn.utils.clip_grad_value_(tmod.parameters(), 0.5)
    for kp, tp in zip(kmod.parameters(), tmod.parameters()):
        assert_close(kp.grad, tp.grad, "float64", "grad")


def test_parameters_vector_round_trip():
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    vec = nn.utils.parameters_to_vector(model.parameters())
    assert vec.shape == (3 * 2 + 2 + 2 + 1,)
    nn.utils.vector_to_parameters(kiln.arange(11, dtype=kiln.float32), model.parameters())
    np.testing.assert_array_equal(model[0].weight.detach().numpy(), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(model[1].bias.detach().numpy(), [10])
    with pytest.raises(ValueError, match="1-D vector of 11 elements"):
        nn.utils.vector_to_parameters(kiln.zeros(5), model.parameters())
