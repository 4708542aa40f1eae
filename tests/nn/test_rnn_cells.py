"""nn.RNNCell, nn.LSTMCell and nn.GRUCell against torch.nn, plus finite differences of the cell math."""
from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from gradcheck import gradcheck
from kiln.functional.recurrent import gru_cell, lstm_cell, rnn_relu_cell, rnn_tanh_cell
from rnn_parity import compare_modules, leaves, randn, to_both, torch_one_thread  # noqa: F401 (fixture)

torch = pytest.importorskip("torch")

F, H = 5, 4
CELLS = [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}), ("RNNCell", {"bias": False}),
         ("LSTMCell", {}), ("LSTMCell", {"bias": False}), ("GRUCell", {}), ("GRUCell", {"bias": False})]


def _state(name: str, lead: tuple, seed: int = 3):
    h = randn(*lead, H, seed=seed)
    return (h, randn(*lead, H, seed=seed + 1)) if name == "LSTMCell" else h


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "given_state"])
@pytest.mark.parametrize("name,kw", CELLS, ids=lambda v: str(v))
def test_cell_matches_torch(name, kw, with_state, batched, dtype):
    kmod = getattr(nn, name)(F, H, **kw).to(dtype)
    tmod = getattr(torch.nn, name)(F, H, **kw).to(getattr(torch, dtype))
    lead = (3,) if batched else ()
    kx, tx = to_both(randn(*lead, F), dtype)
    k_args, t_args, grads = (kx,), (tx,), ([kx], [tx])
    if with_state:
        kh, th = to_both(_state(name, lead), dtype)
        k_args, t_args, grads = (kx, kh), (tx, th), ([kx] + leaves(kh), [tx] + leaves(th))
    compare_modules(kmod, tmod, k_args, t_args, dtype, grads)


@pytest.mark.parametrize("name,kw", CELLS, ids=lambda v: str(v))
def test_cell_parameters_match_torch(name, kw):
    kmod, tmod = getattr(nn, name)(F, H, **kw), getattr(torch.nn, name)(F, H, **kw)
    assert [(k, tuple(v.shape)) for k, v in kmod.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in tmod.state_dict().items()]
    assert repr(kmod) == repr(tmod)
    bound = 1 / math.sqrt(H)
    assert all(np.all(np.abs(p.detach().numpy()) <= bound) for p in kmod.parameters())


CELL_FUNCTIONS = {
    "rnn_tanh": (rnn_tanh_cell, 1), "rnn_relu": (rnn_relu_cell, 1), "gru": (gru_cell, 3),
}


@pytest.mark.parametrize("name", sorted(CELL_FUNCTIONS))
def test_cell_functions_against_finite_differences(name):
    fn, gates = CELL_FUNCTIONS[name]
    inputs = [randn(2, F), randn(2, H, seed=1), randn(gates * H, F, seed=2), randn(gates * H, H, seed=3),
              randn(gates * H, seed=4), randn(gates * H, seed=5)]
    gradcheck(fn, inputs)


def test_lstm_cell_against_finite_differences():
    inputs = [randn(2, F), randn(2, H, seed=1), randn(2, H, seed=6), randn(4 * H, F, seed=2),
              randn(4 * H, H, seed=3), randn(4 * H, seed=4), randn(4 * H, seed=5)]
    gradcheck(lambda x, h, c, *w: lstm_cell(x, (h, c), *w), inputs)


def test_lstm_cell_by_hand():
    """The gate order is (i, f, g, o): check one step against NumPy."""
    rng = np.random.default_rng(0)
    x, h, c = rng.standard_normal((2, F)), rng.standard_normal((2, H)), rng.standard_normal((2, H))
    w_ih, w_hh, b = rng.standard_normal((4 * H, F)), rng.standard_normal((4 * H, H)), rng.standard_normal(4 * H)
    gates = x @ w_ih.T + h @ w_hh.T + b
    i, f, g, o = np.split(gates, 4, axis=1)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    c_want = sig(f) * c + sig(i) * np.tanh(g)
    h_want = sig(o) * np.tanh(c_want)
    t = kiln.tensor
    h_got, c_got = lstm_cell(t(x), (t(h), t(c)), t(w_ih), t(w_hh), t(b), None)
    np.testing.assert_allclose(c_got.numpy(), c_want, rtol=1e-12)
    np.testing.assert_allclose(h_got.numpy(), h_want, rtol=1e-12)


def test_gru_reset_gate_scales_the_hidden_bias():
    """n = tanh(W_in x + b_in + r * (W_hn h + b_hn)): checked against NumPy."""
    rng = np.random.default_rng(1)
    x, h = rng.standard_normal((2, F)), rng.standard_normal((2, H))
    w_ih, w_hh = rng.standard_normal((3 * H, F)), rng.standard_normal((3 * H, H))
    b_ih, b_hh = rng.standard_normal(3 * H), rng.standard_normal(3 * H)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    xr, xz, xn = np.split(x @ w_ih.T + b_ih, 3, axis=1)
    hr, hz, hn = np.split(h @ w_hh.T + b_hh, 3, axis=1)
    r, z = sig(xr + hr), sig(xz + hz)
    n = np.tanh(xn + r * hn)
    want = (1 - z) * n + z * h
    t = kiln.tensor
    np.testing.assert_allclose(gru_cell(t(x), t(h), t(w_ih), t(w_hh), t(b_ih), t(b_hh)).numpy(), want, rtol=1e-12)


def test_cell_errors():
    with pytest.raises(kiln.ShapeError, match="input_size=5"):
        nn.GRUCell(5, 4)(kiln.randn(3, 6))
    with pytest.raises(kiln.ShapeError, match=r"expected hx of shape \(3, 4\)"):
        nn.RNNCell(5, 4)(kiln.randn(3, 5), kiln.randn(2, 4))
    with pytest.raises(TypeError, match=r"tuple \(h, c\)"):
        nn.LSTMCell(5, 4)(kiln.randn(3, 5), kiln.randn(3, 4))
    with pytest.raises(kiln.ShapeError, match="1-D .* or 2-D"):
        nn.LSTMCell(5, 4)(kiln.randn(2, 3, 5))
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNNCell(5, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match="hidden_size must be a positive int, got 0"):
        nn.GRUCell(5, 0)
    with pytest.raises(TypeError, match="float64 but the weights are float32"):
        nn.RNNCell(5, 4)(kiln.randn(3, 5, dtype="float64"))
