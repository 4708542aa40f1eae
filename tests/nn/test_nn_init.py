"""kiln.nn.init: formulas, bounds and statistics, and PyTorch's default inits for Linear and Conv."""
from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln.nn import init


def _np(t: kiln.Tensor) -> np.ndarray:
    return t.detach().numpy()


def test_calculate_gain_matches_pytorch():
    torch = pytest.importorskip("torch")
    for name, param in [("linear", None), ("conv2d", None), ("sigmoid", None), ("tanh", None), ("relu", None),
                        ("leaky_relu", None), ("leaky_relu", 0.2), ("leaky_relu", math.sqrt(5)), ("selu", None)]:
        assert init.calculate_gain(name, param) == pytest.approx(torch.nn.init.calculate_gain(name, param))
    with pytest.raises(ValueError, match="unsupported nonlinearity 'swish'"):
        init.calculate_gain("swish")


def test_fans():
    assert init._calculate_fan_in_and_fan_out(kiln.empty(20, 30)) == (30, 20)
    assert init._calculate_fan_in_and_fan_out(kiln.empty(16, 6, 5, 5)) == (150, 400)
    with pytest.raises(ValueError, match="fewer than 2"):
        init._calculate_fan_in_and_fan_out(kiln.empty(5))


def test_constant_fills():
    t = kiln.empty(3, 4)
    assert init.ones_(t) is t and np.all(_np(t) == 1)
    assert np.all(_np(init.zeros_(t)) == 0)
    assert np.all(_np(init.constant_(t, 0.5)) == 0.5)
    np.testing.assert_array_equal(_np(init.eye_(kiln.empty(3, 4))), np.eye(3, 4))


def test_uniform_and_normal_statistics():
    t = kiln.empty(200, 200)
    u = _np(init.uniform_(t, -2.0, 3.0))
    assert u.min() >= -2.0 and u.max() < 3.0
    assert u.mean() == pytest.approx(0.5, abs=0.03)
    n = _np(init.normal_(t, 1.0, 2.0))
    assert n.mean() == pytest.approx(1.0, abs=0.03)
    assert n.std() == pytest.approx(2.0, rel=0.02)


def test_xavier():
    t = kiln.empty(300, 200)
    bound = math.sqrt(6 / 500) * 2.0
    x = _np(init.xavier_uniform_(t, gain=2.0))
    assert np.abs(x).max() <= bound and np.abs(x).max() > 0.95 * bound
    assert x.std() == pytest.approx(bound / math.sqrt(3), rel=0.02)
    assert _np(init.xavier_normal_(t)).std() == pytest.approx(math.sqrt(2 / 500), rel=0.02)


def test_kaiming():
    t = kiln.empty(300, 200)
    k = _np(init.kaiming_uniform_(t, nonlinearity="relu"))
    bound = math.sqrt(2) * math.sqrt(3 / 200)
    assert np.abs(k).max() <= bound and np.abs(k).max() > 0.95 * bound
    fan_out = _np(init.kaiming_normal_(t, mode="fan_out", nonlinearity="relu"))
    assert fan_out.std() == pytest.approx(math.sqrt(2 / 300), rel=0.02)
    with pytest.raises(ValueError, match="mode must be 'fan_in' or 'fan_out'"):
        init.kaiming_uniform_(t, mode="fan")


def test_inits_are_in_place_under_no_grad_and_keep_leaves():
    w = nn.Parameter(kiln.empty(4, 4))
    version = w._version
    init.kaiming_uniform_(w)
    assert w.is_leaf and w.grad_fn is None and w.requires_grad
    assert w._version > version


def test_inits_follow_the_global_seed():
    kiln.manual_seed(7)
    a = _np(init.normal_(kiln.empty(5)))
    b = _np(init.normal_(kiln.empty(5)))
    kiln.manual_seed(7)
    np.testing.assert_array_equal(_np(init.normal_(kiln.empty(5))), a)
    assert np.any(a != b)


@pytest.mark.parametrize("make,fan_in", [
    (lambda: nn.Linear(400, 300), 400),
    (lambda: nn.Conv2d(16, 32, 5), 16 * 25),
    (lambda: nn.Conv1d(12, 300, 7), 12 * 7),
    (lambda: nn.Conv2d(16, 300, 3, groups=4), 4 * 9),
])
def test_default_linear_and_conv_init(make, fan_in):
    """kaiming_uniform_(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bias uses the same bound."""
    m = make()
    bound = 1 / math.sqrt(fan_in)
    w, b = _np(m.weight), _np(m.bias)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert w.std() == pytest.approx(bound / math.sqrt(3), rel=0.05)
    assert np.abs(b).max() <= bound


def test_default_layer_norm_batch_norm_embedding_init():
    ln = nn.LayerNorm(5)
    assert np.all(_np(ln.weight) == 1) and np.all(_np(ln.bias) == 0)
    bn = nn.BatchNorm2d(3)
    assert np.all(_np(bn.weight) == 1) and np.all(_np(bn.bias) == 0)
    emb = _np(nn.Embedding(500, 100).weight)
    assert emb.std() == pytest.approx(1.0, rel=0.02)


def test_layers_accept_dtype():
    assert nn.Linear(3, 2, dtype=kiln.float64).weight.dtype == kiln.float64
    assert nn.Conv2d(3, 2, 3, dtype="float64").bias.dtype == kiln.float64
    assert nn.LayerNorm(3, dtype=kiln.float64).weight.dtype == kiln.float64


def test_trunc_normal():
    t = _np(init.trunc_normal_(kiln.empty(200, 100), mean=0.5, std=1.0, a=-0.5, b=1.5))
    assert t.min() >= -0.5 and t.max() <= 1.5
    assert t.mean() == pytest.approx(0.5, abs=0.02)
    assert t.std() == pytest.approx(0.5379, rel=0.03)  # N(0, 1) truncated to one sigma
    with pytest.raises(ValueError, match="expected a < b"):
        init.trunc_normal_(kiln.empty(2), a=1.0, b=0.0)


def test_generator_argument():
    g1, g2 = kiln.Generator(5), kiln.Generator(5)
    a = _np(init.kaiming_uniform_(kiln.empty(3, 4), generator=g1))
    b = _np(init.kaiming_uniform_(kiln.empty(3, 4), generator=g2))
    np.testing.assert_array_equal(a, b)
