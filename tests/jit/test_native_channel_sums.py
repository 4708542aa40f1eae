"""A sum over every axis but one middle axis (a conv bias's gradient) runs as generated C, bit for bit NumPy's.

NumPy adds each channel's contiguous runs in order, starting from 0, each run pairwise;
the generated loop must make the same additions in the same order. Compared bitwise with
eager, on data whose sums are sensitive to order (large and small magnitudes mixed).
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from jit_helpers import assert_bitwise
from kiln.jit.backends.cpu import schedule
from native_helpers import native_cache, needs_native, plans_of  # noqa: F401 - native_cache: an autouse fixture

pytestmark = needs_native


def _native_sums(compiled) -> int:
    count = 0
    for plan in plans_of(compiled):
        a = plan.current.analysis
        count += sum(1 for n in a.graph.nodes if n.prim.name == "sum" and a.kinds.get(id(n)) == "native"
                     and schedule.channel_sum(n) is not None)
    return count


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, axes", [((64, 6, 28, 28), (0, 2, 3)), ((3, 5, 7, 9), (0, 2, 3)),
                                         ((2, 3, 4, 300), (0, 1, 3)), ((1, 8, 5, 5), (0, 2, 3)),
                                         ((5, 4, 2), (0, 2)), ((7, 3, 1000), (0, 2))])
@pytest.mark.parametrize("keepdims", [True, False])
def test_channel_sums_equal_numpy_bit_for_bit(dtype, shape, axes, keepdims):
    rng = np.random.default_rng(0)
    x_np = (rng.standard_normal(shape) * np.exp(rng.uniform(-8, 8, shape))).astype(dtype)
    x_np.reshape(-1)[:3] = [-0.0, 1e30, -1e30]
    x = kiln.tensor(x_np)
    fn = lambda x: x.sum(dim=axes, keepdim=keepdims) * 1.0  # noqa: E731
    compiled = kiln.compile(fn, backend="cpu")
    for _ in range(3):  # (the first replay of a backward plan may run in Python while it learns layouts)
        got = compiled(x)
    assert_bitwise(got.numpy(), fn(x).numpy(), oracle="eager")
    assert_bitwise(got.numpy(), np.sum(x_np, axis=axes, keepdims=keepdims), oracle="NumPy")
    assert _native_sums(compiled) == 1


def test_a_conv_bias_gradient_is_native():
    rng = np.random.default_rng(1)
    x = kiln.tensor(rng.standard_normal((8, 3, 12, 12)).astype(np.float32))
    w = kiln.tensor(rng.standard_normal((6, 3, 3, 3)).astype(np.float32), requires_grad=True)
    b = kiln.tensor(rng.standard_normal(6).astype(np.float32), requires_grad=True)
    compiled = kiln.compile(lambda x: F.conv2d(x, w, b).relu().sum(), backend="cpu")
    for _ in range(3):  # (the first replay of a backward plan may run in Python while it learns layouts)
        b.grad = None
        compiled(x).backward()
    got = b.grad.numpy().copy()
    b.grad = None
    F.conv2d(x, w, b).relu().sum().backward()
    assert_bitwise(got, b.grad.numpy(), oracle="eager")
    assert _native_sums(compiled) >= 1


def test_sums_numpy_adds_another_way_are_not_claimed():
    def node(shape, axes):
        return type("N", (), {"inputs": [type("V", (), {"shape": shape})()], "params": {"axes": axes}})()

    assert schedule.channel_sum(node((4, 1, 5, 5), (0, 2, 3))) is None  # one channel: one run over everything
    assert schedule.channel_sum(node((4, 6, 1, 1), (0, 2, 3))) is None  # runs of one element
    assert schedule.channel_sum(node((4, 6, 5), (0, 1))) is None  # the kept axis is the last
    assert schedule.channel_sum(node((4, 6, 5), (1, 2))) is None  # the kept axis is the first
    assert schedule.channel_sum(node((4, 6, 5, 5), (0, 2))) is None  # two kept axes
    assert schedule.channel_sum(node((4, 6, 5, 5), (0, 2, 3))) == (4, 6, 25)
