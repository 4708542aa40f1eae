"""Window reductions (a sum or max over a few small axes: pooling) run as generated C in native plans.

The eager kernel chains the ufunc over the window's slices (kiln/ops/reduce.py, window_reduce);
the generated loop must make the same operations in the same order: outputs and gradients are
compared bit for bit with eager, with NaN, infinities, signed zeros and tied maxima in the data.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from jit_helpers import assert_bitwise
from kiln.jit.backends.cpu import windows
from kiln.ops.reduce import windowed
from native_helpers import native_cache, needs_native, plans_of  # noqa: F401 - native_cache: an autouse fixture

pytestmark = needs_native


def _data(shape, dtype, seed, ties=False):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    if ties:
        x = np.round(x * 2) / 2  # many equal values in a window
    flat = x.reshape(-1)
    flat[:6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30]
    return x


def _native_nodes(compiled) -> list[str]:
    names = []
    for plan in plans_of(compiled):
        a = plan.current.analysis
        names += [n.prim.name for n in a.graph.nodes if a.kinds.get(id(n)) == "native"]
    return names


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize("shape, axes, keepdims", [
    ((64, 6, 14, 2, 14, 2), (3, 5), False),  # a 2x2 pooling window
    ((64, 6, 14, 2, 14, 2), (3, 5), True),
    ((128, 3, 9, 3, 9), (1, 3), False),  # a 3x3 window between kept axes
    ((4096, 2, 3), (1,), True),  # one small middle axis
    ((2, 16384), (0,), False),  # a leading window
])
def test_window_reductions_equal_eager_bit_for_bit(op, dtype, shape, axes, keepdims):
    assert windowed(shape, axes)
    x = kiln.tensor(_data(shape, dtype, 0, ties=op == "max"))

    def fn(x):
        return getattr(x, op)(dim=axes, keepdim=keepdims) if op == "sum" else x.amax(dim=axes, keepdim=keepdims)

    compiled = kiln.compile(fn, backend="cpu")
    for _ in range(3):  # (the first replay of a backward plan may run in Python while it learns layouts)
        got = compiled(x)
    assert_bitwise(got.numpy(), fn(x).numpy(), oracle="eager")
    assert op in _native_nodes(compiled)


def test_max_pool_forward_and_backward_run_natively_and_equal_eager():
    rng = np.random.default_rng(1)
    x_np = np.round(rng.standard_normal((64, 6, 28, 28)) * 2).astype(np.float32) / 2  # ties in windows

    def fn(x):
        return (F.max_pool2d(x.relu(), 2) * 3.0).sum()

    x = kiln.tensor(x_np, requires_grad=True)
    compiled = kiln.compile(fn, backend="cpu")
    for _ in range(3):  # (the first replay of a backward plan may run in Python while it learns layouts)
        x.grad = None
        loss = compiled(x)
        loss.backward()
    got_loss, got_grad = loss.detach().numpy(), x.grad.numpy()
    x.grad = None
    want = fn(x)
    want.backward()
    assert_bitwise(got_loss, want.detach().numpy(), oracle="eager")
    assert_bitwise(got_grad, x.grad.numpy(), oracle="eager")
    names = _native_nodes(compiled)
    assert "max" in names and "sum" in names


def test_non_window_reductions_are_not_claimed():
    """Where the eager kernel takes NumPy's generic reduction, generated code must not stand in."""
    assert not windowed((64, 6, 28, 28), (0, 2, 3))  # a bias gradient: 50,176 per output
    assert not windowed((8, 2, 2), (1, 2))  # too small to chain
    assert not windowed((4, 4), (0, 1))  # every axis
    rng = np.random.default_rng(2)
    x = kiln.tensor(rng.standard_normal((64, 6, 28, 28)).astype(np.float32))
    compiled = kiln.compile(lambda x: x.sum(dim=(0, 2, 3), keepdim=True) * 2.0, backend="cpu")
    for _ in range(3):  # (the first replay of a backward plan may run in Python while it learns layouts)
        got = compiled(x)
    assert_bitwise(got.numpy(), (x.sum(dim=(0, 2, 3), keepdim=True) * 2.0).numpy(), oracle="eager")
    for entry in compiled.cache_entries:
        a = entry.plan.current.analysis
        assert not any(windows.is_window(n) for n in a.graph.nodes)
