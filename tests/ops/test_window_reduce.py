"""The chained fast path for reductions over small window axes (large pooling inputs)."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.ops.reduce import window_reduce


def test_fast_path_is_taken_for_large_pooling_inputs():
    x = np.random.default_rng(0).standard_normal((8, 4, 2, 2, 16, 16)).astype(np.float32)
    assert window_reduce(np, np.maximum, x, (2, 3), False) is not None
    np.testing.assert_array_equal(window_reduce(np, np.maximum, x, (2, 3), True), x.max(axis=(2, 3), keepdims=True))
    np.testing.assert_allclose(window_reduce(np, np.add, x, (2, 3), False), x.sum(axis=(2, 3)), rtol=1e-6)
    assert window_reduce(np, np.maximum, x[:1, :1, :, :, :2, :2], (2, 3), False) is None  # small: generic


@pytest.mark.parametrize("pool", ["max", "avg"])
def test_large_pooling_matches_torch_forward_and_grad(pool):
    torch = pytest.importorskip("torch")
    data = np.random.default_rng(1).standard_normal((8, 4, 32, 32))
    x = kiln.tensor(data, requires_grad=True)
    tx = torch.tensor(data, requires_grad=True)
    fn, tfn = (F.max_pool2d, torch.nn.functional.max_pool2d) if pool == "max" else \
        (F.avg_pool2d, torch.nn.functional.avg_pool2d)
    out, tout = fn(x, 2), tfn(tx, 2)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-12)
    g = np.random.default_rng(2).standard_normal(tout.shape)
    out.backward(kiln.tensor(g))
    tout.backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)
