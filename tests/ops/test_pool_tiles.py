"""max_pool2d over windows that tile the image (stride == kernel, no padding) reads a reshape of
the input instead of unfold2d: the same values and gradients as the unfold route, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.functional as F
from kiln.functional.layers import unfold2d

RNG = np.random.default_rng(5)


def _unfold_route(x, k):
    return kiln.amax(unfold2d(x, k, k, (0, 0), (1, 1)), (2, 3))


@pytest.mark.parametrize("shape, k", [((2, 3, 8, 8), (2, 2)), ((1, 2, 6, 9), (3, 3)), ((2, 1, 4, 6), (2, 3)),
                                      ((3, 2, 64, 64), (2, 2))])
@pytest.mark.parametrize("compiled", [False, True])
def test_tiled_max_pool_equals_the_unfold_route(shape, k, compiled):
    data = RNG.standard_normal(shape).astype(np.float32)
    data.reshape(-1)[::5] = 0.0  # ties share the gradient, on both routes
    data.reshape(-1)[3] = np.inf
    g = RNG.standard_normal((shape[0], shape[1], shape[2] // k[0], shape[3] // k[1])).astype(np.float32)
    results = []
    for fn in (lambda t: F.max_pool2d(t, k), lambda t: _unfold_route(t, k)):
        x = kiln.tensor(data, requires_grad=True)
        run = kiln.compile(fn) if compiled else fn
        out = run(x)
        (out * kiln.tensor(g)).sum().backward()
        results.append((out.detach().numpy(), x.grad.numpy()))
    (out_a, grad_a), (out_b, grad_b) = results
    assert out_a.tobytes() == out_b.tobytes()
    np.testing.assert_array_equal(grad_a, grad_b)


def test_tiled_max_pool_takes_no_unfold():
    graph = kiln.xpr(lambda t: F.max_pool2d(t, 2), kiln.randn(1, 2, 4, 4))
    assert "unfold2d" not in str(graph) and "reshape" in str(graph)
    graph = kiln.xpr(lambda t: F.max_pool2d(t, 2, stride=1), kiln.randn(1, 2, 4, 4))
    assert "unfold2d" in str(graph)  # overlapping windows keep the unfold route
