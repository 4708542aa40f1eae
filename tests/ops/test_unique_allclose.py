"""unique (values, inverse, counts; flat and along a dim) and isclose/allclose, against PyTorch."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.jit import GraphBreakError

torch = pytest.importorskip("torch")

NAN, INF = float("nan"), float("inf")


def _same(k, t):
    np.testing.assert_array_equal(k.numpy(), t.numpy())
    assert k.dtype.name == str(t.dtype).replace("torch.", "")
    assert tuple(k.shape) == tuple(t.shape)


@pytest.mark.parametrize("array", [
    np.array([[3, 1, 3], [2, 1, 7]], np.int64),
    np.array([2.5, -0.0, 0.0, 2.5, -1.0, INF], np.float32),
    np.array([True, False, True]),
    np.array([], np.float32),
    np.array(4, np.int32),
], ids=["int", "float", "bool", "empty", "0d"])
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("counts", [False, True])
def test_unique_matches_pytorch(array, inverse, counts):
    k = kiln.unique(kiln.tensor(array), return_inverse=inverse, return_counts=counts)
    t = torch.unique(torch.tensor(array), return_inverse=inverse, return_counts=counts)
    for a, b in zip(k if isinstance(k, tuple) else (k,), t if isinstance(t, tuple) else (t,)):
        _same(a, b)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_along_a_dim_matches_pytorch(dim):
    array = np.array([[1, 2, 1, 2], [0, 5, 0, 5], [1, 2, 1, 2]], np.int64)
    k = kiln.unique(kiln.tensor(array), dim=dim, return_inverse=True, return_counts=True)
    t = torch.unique(torch.tensor(array), dim=dim, return_inverse=True, return_counts=True)
    for a, b in zip(k, t):
        _same(a, b)


def test_unique_keeps_every_nan_apart_and_is_a_method():
    values, counts = kiln.tensor([NAN, 1.0, NAN]).unique(return_counts=True)
    assert np.isnan(values.numpy()[1:]).all() and values.numpy()[0] == 1.0
    assert counts.tolist() == [1, 1, 1]


def test_unique_in_a_compiled_function_is_a_graph_break():
    def f(x):
        return kiln.unique(x) * 2

    x = kiln.tensor([3, 1, 3])
    with pytest.raises(GraphBreakError, match="unique"):
        kiln.compile(f, fullgraph=True)(x)
    compiled = kiln.compile(f)
    with pytest.warns(RuntimeWarning, match="unique"):
        assert compiled(x).tolist() == [2, 6]
    assert compiled(kiln.tensor([5, 5, 4])).tolist() == [8, 10]  # runs eagerly: sees new data
    assert compiled.stats.fallbacks >= 1


def test_unique_dim_on_0d_raises():
    with pytest.raises(IndexError, match="dim=None"):
        kiln.unique(kiln.tensor(1.0), dim=0)


ISCLOSE_A = [1.0, 1.0 + 1e-6, 1.0, INF, INF, -INF, NAN, NAN, 0.0, 1e-9, 100.0, INF]
ISCLOSE_B = [1.0, 1.0, 1.1, INF, -INF, -INF, NAN, 1.0, 1e-9, 0.0, 100.001, 1.0]


@pytest.mark.parametrize("equal_nan", [False, True])
@pytest.mark.parametrize("rtol, atol", [(1e-5, 1e-8), (0.0, 0.0), (1e-2, 0.0), (0.0, 0.2)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_isclose_matches_pytorch_on_special_values(equal_nan, rtol, atol, dtype):
    a, b = np.array(ISCLOSE_A, dtype), np.array(ISCLOSE_B, dtype)
    got = kiln.isclose(kiln.tensor(a), kiln.tensor(b), rtol=rtol, atol=atol, equal_nan=equal_nan)
    want = torch.isclose(torch.tensor(a), torch.tensor(b), rtol=rtol, atol=atol, equal_nan=equal_nan)
    _same(got, want)
    for i in range(len(a)):
        assert kiln.allclose(kiln.tensor(a[i]), kiln.tensor(b[i]), rtol, atol, equal_nan) == \
            torch.allclose(torch.tensor(a[i]), torch.tensor(b[i]), rtol, atol, equal_nan)


def test_isclose_integers_broadcasting_scalars_and_methods():
    a = np.array([[1, 2, 100], [5, 6, 7]], np.int64)
    b = np.array([1, 3, 101], np.int64)
    _same(kiln.isclose(kiln.tensor(a), kiln.tensor(b), rtol=0.01, atol=0),
          torch.isclose(torch.tensor(a), torch.tensor(b).expand(2, 3), rtol=0.01, atol=0))
    assert kiln.tensor([1.0, 2.0]).allclose(kiln.tensor([1.0, 2.0 + 1e-7]))
    assert not kiln.tensor([1.0, 2.0]).isclose(kiln.tensor([1.0, 2.1])).all()
    assert kiln.allclose(kiln.tensor([0.5, 0.5]), 0.5)
    with pytest.raises(ValueError, match="rtol and atol must be >= 0"):
        kiln.isclose(kiln.ones(1), kiln.ones(1), rtol=-1.0)


def test_isclose_compiles_and_matches_eager():
    def f(a, b):
        return kiln.isclose(a, b, rtol=1e-3, atol=1e-4, equal_nan=True)

    a = kiln.tensor(np.array(ISCLOSE_A, np.float32))
    b = kiln.tensor(np.array(ISCLOSE_B, np.float32))
    compiled = kiln.compile(f, fullgraph=True)
    np.testing.assert_array_equal(compiled(a, b).numpy(), f(a, b).numpy())
    np.testing.assert_array_equal(compiled(b, a).numpy(), f(b, a).numpy())
    assert compiled.stats.hits == 1
