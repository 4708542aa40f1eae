"""Layer ops beyond pure functions: batch-norm running statistics, erf without SciPy,
and argument checks of pooling and convolution."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import kiln
from tolerances import tol


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (2, 3, 4, 4)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batch_norm_running_stats_match_torch(shape: tuple, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal(3).astype(dtype), rng.standard_normal(3).astype(dtype)
    krm, krv = kiln.zeros(3, dtype=dtype), kiln.ones(3, dtype=dtype)
    trm, trv = torch.zeros(3, dtype=getattr(torch, dtype)), torch.ones(3, dtype=getattr(torch, dtype))
    for step in range(3):
        x = (rng.standard_normal(shape) * (step + 1) + step).astype(dtype)
        ko = kiln.batch_norm(kiln.tensor(x), krm, krv, kiln.tensor(w), kiln.tensor(b), training=True, momentum=0.3)
        to = torch.nn.functional.batch_norm(torch.tensor(x), trm, trv, torch.tensor(w), torch.tensor(b),
                                            training=True, momentum=0.3)
        np.testing.assert_allclose(ko.numpy(), to.numpy(), **tol(dtype, "grad"))
        np.testing.assert_allclose(krm.numpy(), trm.numpy(), **tol(dtype, "grad"))
        np.testing.assert_allclose(krv.numpy(), trv.numpy(), **tol(dtype, "grad"))
    x = rng.standard_normal(shape).astype(dtype)
    ko = kiln.batch_norm(kiln.tensor(x), krm, krv, kiln.tensor(w), kiln.tensor(b), training=False)
    to = torch.nn.functional.batch_norm(torch.tensor(x), trm, trv, torch.tensor(w), torch.tensor(b), training=False)
    np.testing.assert_allclose(ko.numpy(), to.numpy(), **tol(dtype, "grad"))
    before = krm.numpy().copy()
    kiln.batch_norm(kiln.tensor(x), krm, krv, training=False)
    np.testing.assert_array_equal(krm.numpy(), before)  # eval leaves the running stats alone


def test_batch_norm_running_stats_are_not_in_the_graph() -> None:
    rm, rv = kiln.zeros(2), kiln.ones(2)
    x = kiln.randn(5, 2, requires_grad=True)
    out = kiln.batch_norm(x, rm, rv, training=True)
    assert not rm.requires_grad and not rv.requires_grad and rm._version > 0
    (out * kiln.randn(5, 2)).sum().backward()
    assert x.grad is not None and np.isfinite(x.grad.numpy()).all()


def test_batch_norm_needs_more_than_one_value_per_channel() -> None:
    with pytest.raises(ValueError, match="more than 1 value"):
        kiln.batch_norm(kiln.ones(1, 3), kiln.zeros(3), kiln.ones(3), training=True)


def test_erf_without_scipy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pure-NumPy fallback is accurate to double precision everywhere."""
    monkeypatch.setitem(sys.modules, "scipy.special", None)  # makes `from scipy.special import` fail
    from kiln.ops.elementwise import _erf_numpy

    x = np.concatenate([np.linspace(-7, 7, 4001), [0.0, 1e-300, -1e-8, 2.999, 3.0, 3.001, 5.999, 6.0, 26.0]])
    ref = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(_erf_numpy(np, x), ref, rtol=1e-14, atol=1e-15)
    y = kiln.erf(kiln.tensor(x.astype(np.float32)))
    assert y.dtype is kiln.float32
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-6, atol=1e-7)
    assert np.isnan(_erf_numpy(np, np.array([np.nan]))).all()
    np.testing.assert_array_equal(_erf_numpy(np, np.array([np.inf, -np.inf])), [1.0, -1.0])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_erf_keeps_dtype(dtype: str) -> None:
    assert kiln.erf(kiln.ones(2, dtype=dtype)).dtype.name == dtype
    assert kiln.gelu(kiln.ones(2, dtype=dtype)).dtype.name == dtype


def test_max_pool2d_rejects_padding_wider_than_half_the_window() -> None:
    with pytest.raises(ValueError, match="padding"):
        kiln.max_pool2d(kiln.ones(1, 1, 4, 4), 2, padding=2)
    kiln.max_pool2d(kiln.ones(1, 1, 4, 4), 3, padding=1)  # exactly half is fine


def test_conv_padding_strings() -> None:
    with pytest.raises(ValueError, match="padding"):
        kiln.conv2d(kiln.ones(1, 1, 4, 4), kiln.ones(1, 1, 3, 3), padding="full")
    assert kiln.conv2d(kiln.ones(1, 1, 5, 4), kiln.ones(2, 1, 2, 2), padding="same").shape == (1, 2, 5, 4)
    assert kiln.conv1d(kiln.ones(1, 1, 5), kiln.ones(1, 1, 4), padding="same").shape == (1, 1, 5)


def test_sdpa_dropout_uses_the_stream() -> None:
    q = kiln.randn(1, 4, 8)
    kiln.manual_seed(5)
    a = kiln.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    kiln.manual_seed(5)
    b = kiln.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.allclose(a.numpy(), kiln.scaled_dot_product_attention(q, q, q).numpy())
