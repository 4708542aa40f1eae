"""The eager VJP of a windowed max (max pooling) gives the decomposed VJP's bits and layout."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.ops import reduce as reduce_ops


def _pool_grad(monkeypatch, fast: bool, k: int, ties: bool, transposed: bool) -> np.ndarray:
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(reduce_ops, "array_vjp", lambda g: False)
        calls = []
        real = reduce_ops.window_max_grad
        m.setattr(reduce_ops, "window_max_grad", lambda *a: calls.append(1) or real(*a))
        kiln.manual_seed(0)
        x = kiln.randn(8, 16, 24, 24, requires_grad=True)
        h = x.round() if ties else x  # rounding makes many windows with tied maxima
        if transposed:
            h = h.transpose(0, 1).contiguous().transpose(0, 1)
        y = F.max_pool2d(F.relu(h), k)
        (y * kiln.randn(*y.shape)).sum().backward()
        assert bool(calls) == fast
        return x.grad.numpy()


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("transposed", [False, True])
def test_windowed_max_gradient_matches_the_decomposed_vjp(monkeypatch, k, ties, transposed):
    fast = _pool_grad(monkeypatch, True, k, ties, transposed)
    plain = _pool_grad(monkeypatch, False, k, ties, transposed)
    assert fast.strides == plain.strides
    np.testing.assert_array_equal(fast.view(np.uint32), plain.view(np.uint32))


def test_tied_maxima_share_the_gradient_evenly():
    x = kiln.zeros(1, 1, 128, 128, requires_grad=True)  # every window is a four-way tie
    F.max_pool2d(x, 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((1, 1, 128, 128), 0.25, np.float32))


def test_nan_windows_give_nan_gradients_as_the_decomposed_vjp(monkeypatch):
    grads = []
    for fast in (True, False):
        with monkeypatch.context() as m:
            if not fast:
                m.setattr(reduce_ops, "array_vjp", lambda g: False)
            x = kiln.ones(1, 1, 128, 128)
            x[0, 0, 0, 0] = float("nan")
            x.requires_grad_()
            F.max_pool2d(x, 2).sum().backward()
            grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])
    assert np.isnan(grads[0][0, 0, :2, :2]).all()
