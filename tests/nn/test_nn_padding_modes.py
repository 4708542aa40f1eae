"""Conv1d and Conv2d ``padding_mode`` "reflect", "replicate" and "circular" against torch.nn.

PyTorch pads the input with ``F.pad`` in the mode (by ``_reversed_padding_repeated_twice``) and
convolves without padding; kiln must give the same outputs, input and weight gradients, repr,
errors, and compiled results equal to eager ones.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from compile_parity import check_compiled
from nn_parity import check_parity

torch = pytest.importorskip("torch")
tnn = torch.nn

MODES = ["reflect", "replicate", "circular"]
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


CONV2D_CASES = [
    dict(in_channels=2, out_channels=3, kernel_size=3, padding=1),
    dict(in_channels=2, out_channels=4, kernel_size=(3, 2), padding=(2, 1), stride=(2, 1), bias=False),
    dict(in_channels=4, out_channels=4, kernel_size=3, padding=2, dilation=2, groups=2),
    dict(in_channels=2, out_channels=3, kernel_size=4, padding="same"),  # odd total: extra pad after
    dict(in_channels=2, out_channels=3, kernel_size=(3, 2), padding="same", dilation=(2, 1)),
    dict(in_channels=2, out_channels=3, kernel_size=3, padding="valid"),
]
CONV1D_CASES = [
    dict(in_channels=2, out_channels=3, kernel_size=3, padding=1),
    dict(in_channels=2, out_channels=4, kernel_size=3, padding=2, stride=2, bias=False),
    dict(in_channels=4, out_channels=2, kernel_size=2, padding=3, dilation=2, groups=2),
    dict(in_channels=2, out_channels=3, kernel_size=4, padding="same"),
    dict(in_channels=2, out_channels=3, kernel_size=3, padding="valid"),
]


def _ids(case: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in case.items() if k not in ("in_channels", "out_channels"))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CONV2D_CASES, ids=_ids)
def test_conv2d_padding_mode_matches_torch(case, mode, dtype):
    """Forward, input gradient and weight/bias gradients of Conv2d equal torch's for each mode."""
    x = randn(2, case["in_channels"], 6, 5)
    check_parity(nn.Conv2d(**case, padding_mode=mode), tnn.Conv2d(**case, padding_mode=mode), [x], dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CONV1D_CASES, ids=_ids)
def test_conv1d_padding_mode_matches_torch(case, mode, dtype):
    """Forward, input gradient and weight/bias gradients of Conv1d equal torch's for each mode."""
    x = randn(2, case["in_channels"], 7)
    check_parity(nn.Conv1d(**case, padding_mode=mode), tnn.Conv1d(**case, padding_mode=mode), [x], dtype)


@pytest.mark.parametrize("mode", MODES)
def test_unbatched_inputs_match_torch(mode):
    """(C, H, W) and (C, L) inputs, without a batch dim, pad and convolve as torch does."""
    check_parity(nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode),
                 tnn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode), [randn(2, 5, 6)], "float64")
    check_parity(nn.Conv1d(2, 3, 3, padding=2, padding_mode=mode),
                 tnn.Conv1d(2, 3, 3, padding=2, padding_mode=mode), [randn(2, 5)], "float64")


@pytest.mark.parametrize("mode", MODES)
def test_the_pre_padding_is_pytorchs(mode):
    """_reversed_padding_repeated_twice (the F.pad argument) is the list torch computes."""
    for cls, tcls, kwargs in [
        (nn.Conv2d, tnn.Conv2d, dict(kernel_size=(3, 2), padding=(2, 1))),
        (nn.Conv2d, tnn.Conv2d, dict(kernel_size=(4, 3), padding="same", dilation=(1, 2))),
        (nn.Conv2d, tnn.Conv2d, dict(kernel_size=3, padding="valid")),
        (nn.Conv1d, tnn.Conv1d, dict(kernel_size=4, padding="same")),
        (nn.Conv1d, tnn.Conv1d, dict(kernel_size=3, padding=2)),
    ]:
        ours, theirs = cls(1, 1, padding_mode=mode, **kwargs), tcls(1, 1, padding_mode=mode, **kwargs)
        assert list(ours._reversed_padding_repeated_twice) == list(theirs._reversed_padding_repeated_twice)


def test_repr_shows_the_padding_mode_as_torch_does():
    """padding_mode appears in the repr (last) when it is not 'zeros', exactly as in torch."""
    for cls, tcls, args, kwargs in [
        (nn.Conv2d, tnn.Conv2d, (2, 3, 3), dict(padding=1, padding_mode="reflect")),
        (nn.Conv2d, tnn.Conv2d, (2, 4, 3), dict(padding="same", padding_mode="circular", bias=False, groups=2)),
        (nn.Conv1d, tnn.Conv1d, (2, 3, 3), dict(padding=2, dilation=2, padding_mode="replicate")),
        (nn.Conv2d, tnn.Conv2d, (2, 3, 3), dict(padding=1)),
        (nn.ConvTranspose2d, tnn.ConvTranspose2d, (2, 3, 3), dict(stride=2, output_padding=1, dilation=2)),
    ]:
        assert repr(cls(*args, **kwargs)) == repr(tcls(*args, **kwargs))


@pytest.mark.parametrize("cls", ["ConvTranspose1d", "ConvTranspose2d"])
@pytest.mark.parametrize("mode", MODES)
def test_transposed_convolutions_take_only_zeros(cls, mode):
    """Like torch, transposed convolutions refuse every padding_mode but 'zeros' with a ValueError."""
    with pytest.raises(ValueError, match='Only "zeros" padding mode is supported'):
        getattr(tnn, cls)(2, 3, 3, padding_mode=mode)
    with pytest.raises(ValueError, match=f'Only "zeros" padding mode is supported for {cls}'):
        getattr(nn, cls)(2, 3, 3, padding_mode=mode)
    assert getattr(nn, cls)(2, 3, 3, padding_mode="zeros").padding_mode == "zeros"


@pytest.mark.parametrize("cls", ["Conv1d", "Conv2d"])
def test_an_unknown_padding_mode_is_a_value_error(cls):
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        getattr(tnn, cls)(2, 3, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match="padding_mode must be one of.*'mirror'"):
        getattr(nn, cls)(2, 3, 3, padding_mode="mirror")


def test_reflect_padding_as_wide_as_the_input_fails_in_both():
    """Reflection needs a pad smaller than the dim, in torch and in kiln."""
    x = randn(1, 1, 4, 4)
    with pytest.raises(RuntimeError):
        tnn.Conv2d(1, 1, 3, padding=4, padding_mode="reflect")(torch.tensor(x))
    with pytest.raises(ValueError, match="reflect"):
        nn.Conv2d(1, 1, 3, padding=4, padding_mode="reflect")(kiln.tensor(x))


@pytest.mark.parametrize("mode", MODES)
def test_compiled_equals_eager(mode):
    """kiln.compile of a conv net with each padding mode gives eager's outputs and gradients."""
    kiln.manual_seed(1)
    model2d = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, padding_mode=mode), nn.Tanh(),
                            nn.Conv2d(3, 2, (2, 3), padding="same", padding_mode=mode)).to("float64")
    check_compiled(model2d, kiln.tensor(randn(2, 2, 5, 6), dtype="float64", requires_grad=True))
    model1d = nn.Conv1d(2, 3, 4, padding="same", dilation=2, padding_mode=mode).to("float64")
    check_compiled(model1d, kiln.tensor(randn(2, 2, 9), dtype="float64", requires_grad=True))


def test_zeros_mode_is_unchanged():
    """The default mode still pads inside the convolution (no F.pad), and matches torch."""
    check_parity(nn.Conv2d(2, 3, 4, padding="same"), tnn.Conv2d(2, 3, 4, padding="same"),
                 [randn(2, 2, 5, 5)], "float64")
    assert nn.Conv2d(2, 3, 3).padding_mode == "zeros"
