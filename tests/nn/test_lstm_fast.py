"""The eager LSTM gate nodes (kiln/functional/lstm_fast.py) give the decomposed ops' bits."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.functional import lstm_fast, recurrent


def _run(fused: bool, monkeypatch, *, dtype=kiln.float32, create_graph: bool = False, **lstm_kw) -> list:
    """An LSTM step's outputs and every gradient, with the fused gate nodes on or off."""
    with monkeypatch.context() as m:
        if not fused:
            m.setattr(recurrent, "fast_lstm_gates", lambda gates, c: None)
        calls = []
        if fused:
            real = lstm_fast.fast_lstm_gates
            m.setattr(recurrent, "fast_lstm_gates", lambda g, c: calls.append(1) or real(g, c))
        kiln.manual_seed(0)
        rnn = kiln.nn.LSTM(8, 6, **lstm_kw).to(dtype)
        x = kiln.randn(5, 3, 8, dtype=dtype, requires_grad=True)
        layers = lstm_kw.get("num_layers", 1) * (2 if lstm_kw.get("bidirectional") else 1)
        h0 = kiln.randn(layers, 3, lstm_kw.get("proj_size") or 6, dtype=dtype, requires_grad=True)
        c0 = kiln.randn(layers, 3, 6, dtype=dtype, requires_grad=True)
        out, (h, c) = rnn(x, (h0, c0))
        # the final states are read besides the outputs: gradients reach c and h from two sides
        loss = (out * out).sum() + (c * 3).sum() + (c * c).sum() + h.sum()
        if create_graph:
            (gx,) = kiln.autograd.grad(loss, x, create_graph=True)
            (gx * gx).sum().backward()
        else:
            loss.backward()
        assert bool(calls) == fused
        return [out.detach(), h.detach(), c.detach(), x.grad, h0.grad, c0.grad] + [p.grad for p in rnn.parameters()]


def _assert_same_bits(a: list, b: list) -> None:
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u.numpy().view(np.uint8), v.numpy().view(np.uint8))


@pytest.mark.parametrize("kw", [{}, {"num_layers": 2, "bidirectional": True}, {"proj_size": 4}])
@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64])
def test_fused_gates_give_the_decomposed_bits(kw, dtype, monkeypatch):
    _assert_same_bits(_run(True, monkeypatch, dtype=dtype, **kw), _run(False, monkeypatch, dtype=dtype, **kw))


def test_second_order_gradients_match_the_decomposed_path(monkeypatch):
    fused, plain = _run(True, monkeypatch, create_graph=True), _run(False, monkeypatch, create_graph=True)
    for u, v in zip(fused, plain):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-5, atol=1e-6)


def test_gradients_match_finite_differences():
    kiln.manual_seed(1)
    gates = kiln.randn(2, 12, dtype=kiln.float64, requires_grad=True)
    c = kiln.randn(2, 3, dtype=kiln.float64, requires_grad=True)
    h, c_new = lstm_fast.fast_lstm_gates(gates, c)
    (h.sum() * 2 + (c_new * c_new).sum()).backward()
    eps = 1e-6

    def value(g_arr, c_arr):
        hh, cc = lstm_fast.fast_lstm_gates(kiln.tensor(g_arr), kiln.tensor(c_arr))
        return float((hh.sum() * 2 + (cc * cc).sum()).item())

    g0, c0 = gates.detach().numpy(), c.detach().numpy()
    for arr, grad in ((g0, gates.grad.numpy()), (c0, c.grad.numpy())):
        for idx in np.ndindex(arr.shape):
            up, down = arr.copy(), arr.copy()
            up[idx] += eps
            down[idx] -= eps
            args_up = (up, c0) if arr is g0 else (g0, up)
            args_down = (down, c0) if arr is g0 else (g0, down)
            assert abs((value(*args_up) - value(*args_down)) / (2 * eps) - grad[idx]) < 1e-6


def test_compiled_lstm_equals_eager_with_the_fused_nodes():
    kiln.manual_seed(0)
    rnn = kiln.nn.LSTM(8, 6, 2)
    x = kiln.randn(5, 3, 8)
    compiled = kiln.compile(rnn)
    for model in (rnn, compiled):
        model.zero_grad()
        out, (h, c) = model(x)
        ((out * out).sum() + c.sum()).backward()
        if model is rnn:
            eager = [out.detach().numpy(), c.detach().numpy()] + [p.grad.numpy().copy() for p in rnn.parameters()]
    got = [out.detach().numpy(), c.detach().numpy()] + [p.grad.numpy() for p in rnn.parameters()]
    for u, v in zip(got, eager):  # the compiled backend's tanh/sigmoid are within a few ulp of NumPy's
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


def test_changing_the_cell_state_in_place_before_backward_raises():
    gates = kiln.randn(2, 12, requires_grad=True)
    c = kiln.randn(2, 3).requires_grad_()
    c_in = c * 1.0
    h, c_new = lstm_fast.fast_lstm_gates(gates, c_in)
    c_in.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c_new.sum().backward()


def test_cases_it_does_not_take_fall_back():
    assert lstm_fast.fast_lstm_gates(kiln.randn(12), kiln.randn(3)) is None  # 1-D (an unbatched cell)
    assert lstm_fast.fast_lstm_gates(kiln.randn(2, 12), kiln.randn(2, 3, dtype=kiln.float64)) is None
    assert lstm_fast.fast_lstm_gates(kiln.randn(2, 12), kiln.randn(1, 3)) is None  # a broadcast state
