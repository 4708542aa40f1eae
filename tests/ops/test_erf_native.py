"""Eager float32 erf runs kiln's vectorized erf (kiln/ops/erf_native.py): the bits compiled plans fuse, within
4 ulp of SciPy's, exact on special values, for any layout."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.dtypes import get_dtype
from kiln.jit.backends import cpu
from kiln.jit.backends.cpu import codegen
from kiln.jit.backends.cpu.elementwise_groups import Group
from kiln.jit.ir import Node, Value
from kiln.ops import erf_native
from kiln.ops.elementwise import _erf_numpy
from kiln.ops.primitive import REGISTRY

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")


def _ulps(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64)).max())


def test_eager_erf_is_the_fused_kernels_erf_bit_for_bit():
    x = (np.random.default_rng(0).standard_normal((300, 257)) * 3).astype(np.float32)
    node = Node(REGISTRY["erf"], [Value(x.shape, get_dtype("float32"))], {}, Value(x.shape, get_dtype("float32")))
    fused = codegen.FusedElementwise(Group([node])).kernel(np, x)
    eager = kiln.erf(kiln.tensor(x)).numpy()
    np.testing.assert_array_equal(eager.view(np.int32), fused.view(np.int32))
    assert _ulps(eager, _erf_numpy(np, x)) <= 4  # SciPy, the oracle


def test_special_values_layouts_and_sizes():
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -4.5, 4.5], np.float32)
    got = erf_native.erf_float32(special)
    want = _erf_numpy(np, special)
    assert np.isnan(got[0]) and np.array_equal(got[1:], want[1:]) and np.signbit(got[4])
    x = np.random.default_rng(1).standard_normal((64, 48)).astype(np.float32)
    np.testing.assert_array_equal(erf_native.erf_float32(x.T), erf_native.erf_float32(x).T)  # a transposed view
    assert erf_native.erf_float32(np.zeros((0, 3), np.float32)).shape == (0, 3)
    assert kiln.erf(kiln.tensor(np.float32(0.5))).shape == ()


def test_gelu_gradient_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(2).standard_normal((128, 64)).astype(np.float32)
    k = kiln.tensor(x, requires_grad=True)
    kiln.nn.functional.gelu(k).sum().backward()
    t = torch.tensor(x, requires_grad=True)
    torch.nn.functional.gelu(t).sum().backward()
    np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_without_a_compiler_eager_erf_keeps_scipy(monkeypatch):
    monkeypatch.setattr(erf_native, "_function", [None])
    x = np.linspace(-3, 3, 101, dtype=np.float32)
    np.testing.assert_array_equal(kiln.erf(kiln.tensor(x)).numpy(), _erf_numpy(np, x))
