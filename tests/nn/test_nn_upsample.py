"""nn.Upsample and F.interpolate against torch, plus finite differences."""
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


CASES_2D = [
    ("nearest", dict(scale_factor=2)),
    ("nearest", dict(scale_factor=3)),
    ("nearest", dict(size=(7, 5))),
    ("nearest", dict(size=(3, 2))),
    ("nearest", dict(scale_factor=1.7)),
    ("nearest", dict(scale_factor=(0.6, 2.5))),
    ("nearest", dict(scale_factor=1.7, recompute_scale_factor=True)),
    ("nearest-exact", dict(size=(7, 3))),
    ("nearest-exact", dict(scale_factor=2.5)),
    ("bilinear", dict(scale_factor=2)),
    ("bilinear", dict(scale_factor=2, align_corners=True)),
    ("bilinear", dict(size=(7, 5), align_corners=True)),
    ("bilinear", dict(size=(3, 2))),
    ("bilinear", dict(size=(1, 1), align_corners=True)),
    ("bilinear", dict(scale_factor=(1.5, 0.7))),
    ("bilinear", dict(scale_factor=1.3, recompute_scale_factor=True)),
    ("area", dict(size=(3, 2))),
    ("area", dict(scale_factor=0.5)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode,kw", CASES_2D, ids=lambda v: str(v))
def test_upsample_2d(dtype, mode, kw):
    check_parity(nn.Upsample(mode=mode, **kw), torch.nn.Upsample(mode=mode, **kw), [randn(2, 3, 5, 4)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode,kw,shape", [
    ("nearest", dict(scale_factor=2), (2, 3, 5)),
    ("linear", dict(size=9), (2, 3, 5)),
    ("linear", dict(scale_factor=1.5, align_corners=True), (2, 3, 5)),
    ("nearest", dict(size=(3, 4, 5)), (1, 2, 2, 3, 4)),
    ("trilinear", dict(scale_factor=2), (1, 2, 2, 3, 4)),
    ("area", dict(size=3), (2, 3, 7)),
], ids=lambda v: str(v))
def test_interpolate_1d_and_3d(dtype, mode, kw, shape):
    check_parity(nn.Upsample(mode=mode, **kw), torch.nn.Upsample(mode=mode, **kw), [randn(*shape)], dtype)


def test_fixed_mode_upsamplers():
    x = randn(1, 2, 3, 4)
    check_parity(nn.UpsamplingNearest2d(scale_factor=2), torch.nn.UpsamplingNearest2d(scale_factor=2), [x],
                 "float64")
    check_parity(nn.UpsamplingBilinear2d(size=(5, 7)), torch.nn.UpsamplingBilinear2d(size=(5, 7)), [x], "float64")


def test_nearest_on_integer_images():
    img = np.arange(12, dtype=np.uint8).reshape(1, 1, 3, 4)
    x = kiln.tensor(img)
    got = kiln.nn.functional.interpolate(x, scale_factor=2)
    want = torch.nn.functional.interpolate(torch.tensor(img), scale_factor=2)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("mode,kw", [("bilinear", dict(size=(4, 5))), ("bilinear", dict(scale_factor=2,
                                     align_corners=True)), ("nearest", dict(size=(5, 2)))], ids=str)
def test_interpolate_finite_differences(mode, kw):
    gradcheck(lambda x: kiln.nn.functional.interpolate(x, mode=mode, **kw), [randn(1, 2, 3, 3)])


def test_bilinear_by_hand():
    """Doubling with align_corners=True puts each output on the line between two neighbours."""
    x = np.array([[[[0.0, 3.0]]]])
    got = kiln.nn.functional.interpolate(kiln.tensor(x), size=(1, 4), mode="bilinear", align_corners=True)
    np.testing.assert_allclose(got.numpy().ravel(), [0.0, 1.0, 2.0, 3.0], rtol=1e-12)


def test_errors():
    f = kiln.nn.functional.interpolate
    x = kiln.randn(1, 2, 3, 3)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor, got both"):
        f(x, size=4, scale_factor=2)
    with pytest.raises(ValueError, match="got neither"):
        f(x)
    with pytest.raises(ValueError, match="align_corners can only be set"):
        f(x, scale_factor=2, align_corners=True)
    with pytest.raises(kiln.ShapeError, match="'linear' needs a 3-D input"):
        f(x, scale_factor=2, mode="linear")
    with pytest.raises(NotImplementedError, match="'bicubic' is not supported yet"):
        f(x, scale_factor=2, mode="bicubic")
    with pytest.raises(ValueError, match="unknown mode"):
        f(x, scale_factor=2, mode="cubic")
    with pytest.raises(ValueError, match="sequence of 2"):
        f(x, size=(4, 4, 4))
    with pytest.raises(kiln.ShapeError, match="3-D, 4-D or 5-D"):
        f(kiln.randn(3, 3), size=4)
    with pytest.raises(TypeError, match="floating-point"):
        f(kiln.tensor([[[1, 2]]]), size=4, mode="linear")
