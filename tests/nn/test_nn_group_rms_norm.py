"""nn.GroupNorm and nn.RMSNorm against torch.nn, plus finite differences and NumPy by hand."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from gradcheck import gradcheck
from nn_parity import check_parity

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64"]


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _randomize(tmod) -> None:
    with torch.no_grad():
        for p in tmod.parameters():
            p.copy_(torch.randn(p.shape))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("groups,channels,shape", [(2, 6, (3, 6, 4, 5)), (1, 4, (2, 4, 3)), (4, 4, (2, 4, 3)),
                                                   (3, 6, (2, 6, 2, 3, 2))])
@pytest.mark.parametrize("kw", [{}, {"affine": False}, {"bias": False}], ids=["affine", "no_affine", "no_bias"])
def test_group_norm(dtype, groups, channels, shape, kw):
    kmod, tmod = nn.GroupNorm(groups, channels, **kw), torch.nn.GroupNorm(groups, channels, **kw)
    if kw.get("affine", True):
        _randomize(tmod)
    check_parity(kmod, tmod, [randn(*shape) * 3 + 1], dtype)


def test_group_norm_by_hand():
    x = randn(2, 6, 3, 3)
    got = kiln.nn.functional.group_norm(kiln.tensor(x), 3, eps=1e-5).numpy()
    g = x.reshape(2, 3, -1)
    want = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_group_norm_finite_differences():
    gradcheck(lambda x, w, b: kiln.nn.functional.group_norm(x, 2, w, b), [randn(2, 4, 3), randn(4, seed=1),
                                                                         randn(4, seed=2)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,normalized", [((4, 6), 6), ((2, 3, 6), (6,)), ((2, 3, 4), (3, 4))])
@pytest.mark.parametrize("kw", [{}, {"eps": 1e-3}, {"elementwise_affine": False}], ids=["default", "eps", "no_affine"])
def test_rms_norm(dtype, shape, normalized, kw):
    kmod, tmod = nn.RMSNorm(normalized, **kw), torch.nn.RMSNorm(normalized, **kw)
    if kw.get("elementwise_affine", True):
        _randomize(tmod)
    check_parity(kmod, tmod, [randn(*shape)], dtype)


def test_rms_norm_default_eps_is_the_dtypes_machine_epsilon():
    x = np.full((1, 4), 1e-4)  # mean(x^2) = 1e-8: eps matters, and differs between float32 and float64
    for dtype, eps in (("float32", np.finfo(np.float32).eps), ("float64", np.finfo(np.float64).eps)):
        got = kiln.nn.functional.rms_norm(kiln.tensor(x, dtype=dtype), (4,)).numpy()
        np.testing.assert_allclose(got, x / np.sqrt(1e-8 + eps), rtol=1e-5)


def test_rms_norm_finite_differences():
    gradcheck(lambda x, w: kiln.nn.functional.rms_norm(x, (2, 3), w, 1e-6), [randn(4, 2, 3), randn(2, 3, seed=1)])


def test_state_dicts_and_reprs_match_torch():
    for kmod, tmod in ((nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4)), (nn.RMSNorm([2, 3]), torch.nn.RMSNorm([2, 3])),
                       (nn.GroupNorm(2, 4, affine=False), torch.nn.GroupNorm(2, 4, affine=False)),
                       (nn.GroupNorm(2, 4, bias=False), torch.nn.GroupNorm(2, 4, bias=False))):
        assert list(kmod.state_dict()) == list(tmod.state_dict())
        assert repr(kmod) == repr(tmod)


def test_errors():
    with pytest.raises(ValueError, match="divisible by num_groups"):
        nn.GroupNorm(4, 6)
    with pytest.raises(kiln.ShapeError, match=r"expected an input \(N, 6, \*\)"):
        nn.GroupNorm(3, 6)(kiln.randn(2, 4, 3))
    with pytest.raises(kiln.ShapeError, match="normalized_shape"):
        nn.RMSNorm(5)(kiln.randn(2, 4))
    with pytest.raises(TypeError, match="floating-point"):
        kiln.nn.functional.rms_norm(kiln.tensor([[1, 2]]), 2)
