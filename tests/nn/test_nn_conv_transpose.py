"""nn.ConvTranspose2d / ConvTranspose1d against torch.nn, plus finite differences and output_size."""
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
    dict(in_channels=3, out_channels=5, kernel_size=3),
    dict(in_channels=3, out_channels=5, kernel_size=3, stride=2, padding=1, output_padding=1),
    dict(in_channels=4, out_channels=6, kernel_size=(2, 3), stride=(2, 1), padding=(0, 1), bias=False),
    dict(in_channels=4, out_channels=6, kernel_size=3, stride=(2, 3), padding=(1, 0), dilation=2, groups=2,
         output_padding=(1, 2)),
    dict(in_channels=4, out_channels=4, kernel_size=3, groups=4, padding=2),
    dict(in_channels=2, out_channels=3, kernel_size=2, stride=1, padding=1, dilation=3, output_padding=2),
    dict(in_channels=2, out_channels=3, kernel_size=4, stride=4),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES_2D, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_conv_transpose2d(dtype, case):
    x = randn(2, case["in_channels"], 5, 6)
    check_parity(nn.ConvTranspose2d(**case), torch.nn.ConvTranspose2d(**case), [x], dtype)


def test_conv_transpose2d_unbatched():
    check_parity(nn.ConvTranspose2d(3, 2, 3, stride=2), torch.nn.ConvTranspose2d(3, 2, 3, stride=2),
                 [randn(3, 4, 4)], "float64")


CASES_1D = [
    dict(in_channels=3, out_channels=5, kernel_size=3),
    dict(in_channels=4, out_channels=6, kernel_size=4, stride=3, padding=1, output_padding=2, groups=2),
    dict(in_channels=2, out_channels=2, kernel_size=3, dilation=2, bias=False),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES_1D, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_conv_transpose1d(dtype, case):
    x = randn(2, case["in_channels"], 7)
    check_parity(nn.ConvTranspose1d(**case), torch.nn.ConvTranspose1d(**case), [x], dtype)


@pytest.mark.parametrize("output_size", [(9, 11), (10, 12), [2, 3, 10, 11]])
def test_output_size_picks_output_padding(output_size):
    kmod = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1)
    tmod = torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1)
    check_parity(kmod, tmod, [randn(2, 3, 5, 6)], "float64", kwargs={"output_size": output_size})


def test_output_size_out_of_range():
    with pytest.raises(ValueError, match="valid sizes for dim 0 .* are 9 to 10"):
        nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1)(kiln.randn(1, 3, 5, 6), output_size=(12, 11))


def test_against_finite_differences():
    f = kiln.nn.functional.conv_transpose2d
    gradcheck(lambda x, w, b: f(x, w, b, stride=2, padding=1, output_padding=1, groups=2),
              [randn(1, 4, 3, 3), randn(4, 2, 3, 2, seed=1), randn(4, seed=2)])


def test_is_the_input_gradient_of_conv2d():
    """conv_transpose2d(g, w) is the gradient of conv2d(x, w) with respect to x."""
    x = kiln.randn(2, 3, 9, 9, dtype="float64", requires_grad=True)
    w = kiln.randn(4, 3, 3, 3, dtype="float64")
    out = kiln.nn.functional.conv2d(x, w, stride=2, padding=1)
    g = kiln.randn(*out.shape, dtype="float64")
    (out * g).sum().backward()
    want = kiln.nn.functional.conv_transpose2d(g, w, stride=2, padding=1)
    np.testing.assert_allclose(want.numpy(), x.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_weight_shape_and_init_match_torch():
    kmod, tmod = nn.ConvTranspose2d(4, 6, 3, groups=2), torch.nn.ConvTranspose2d(4, 6, 3, groups=2)
    assert tuple(kmod.weight.shape) == tuple(tmod.weight.shape) == (4, 3, 3, 3)
    bound = 1 / np.sqrt(3 * 9)  # fan_in = (out / groups) * kernel area, as in PyTorch
    assert np.all(np.abs(kmod.weight.detach().numpy()) <= bound)
    assert np.all(np.abs(kmod.bias.detach().numpy()) <= bound)
    assert repr(nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=1)) == \
        repr(torch.nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=1))


def test_errors():
    with pytest.raises(ValueError, match="output_padding must be smaller"):
        nn.ConvTranspose2d(3, 2, 3, stride=1, output_padding=1)
    with pytest.raises(ValueError, match="string paddings"):
        nn.ConvTranspose2d(3, 2, 3, padding="same")
    with pytest.raises(kiln.ShapeError, match="4 channels and groups=1"):
        nn.ConvTranspose2d(3, 2, 3)(kiln.randn(1, 4, 5, 5))
    with pytest.raises(TypeError, match="float64 but the weight is float32"):
        nn.ConvTranspose2d(3, 2, 3)(kiln.randn(1, 3, 5, 5, dtype="float64"))
    with pytest.raises(kiln.ShapeError, match="reduce the padding"):
        kiln.nn.functional.conv_transpose2d(kiln.randn(1, 1, 1, 1), kiln.randn(1, 1, 1, 1), padding=1)
