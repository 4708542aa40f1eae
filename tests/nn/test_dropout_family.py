"""Channel dropout (Dropout1d/2d/3d) and alpha dropout (AlphaDropout, FeatureAlphaDropout).

Masks are random, so kiln is compared with PyTorch by structure and statistics: which dims a mask
spans, the scale of survivors, the affine map of alpha dropout, the ranks accepted and the
warnings given. kiln.compile must draw exactly eager's masks, bit for bit.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from compile_parity import check_compiled

torch = pytest.importorskip("torch")
TF = torch.nn.functional

CHANNEL_FNS = ["dropout1d", "dropout2d", "dropout3d", "feature_alpha_dropout"]
MODULES = {"Dropout1d": "dropout1d", "Dropout2d": "dropout2d", "Dropout3d": "dropout3d",
           "AlphaDropout": "alpha_dropout", "FeatureAlphaDropout": "feature_alpha_dropout"}
GOOD_SHAPES = {"dropout1d": (16, 32, 5), "dropout2d": (16, 32, 3, 3), "dropout3d": (8, 32, 2, 3, 3),
               "alpha_dropout": (64, 64), "feature_alpha_dropout": (16, 32, 5)}


def _constant_dims(out: np.ndarray) -> set[int]:
    """The dims along which every slice of `out` is the same: the dims one mask value spans."""
    return {d for d in range(out.ndim) if np.array_equal(out, np.broadcast_to(out.take([0], d), out.shape))}


def _call(lib, name: str, x: np.ndarray, p: float = 0.5, training: bool = True):
    """(output, warning texts, error type) of lib's functional `name` on `x`."""
    t = lib.tensor(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = getattr(lib.nn.functional, name)(t, p, training)
        except Exception as error:  # noqa: BLE001 - the type is what is compared
            return None, [str(w.message) for w in caught], type(error)
    return out.numpy(), [str(w.message) for w in caught], None


@pytest.mark.parametrize("ndim", range(7))
@pytest.mark.parametrize("name", CHANNEL_FNS)
def test_accepted_ranks_warnings_and_mask_structure_match_torch(name, ndim):
    torch.manual_seed(0)
    x = np.ones((16, 16, 3, 3, 3, 3)[:ndim])  # 16 along the dims a mask may vary over: no coincidences
    ours, our_warnings, our_error = _call(kiln, name, x)
    theirs, their_warnings, their_error = _call(torch, name, x)
    assert (our_error is None) == (their_error is None), (our_error, their_error)
    if our_error is not None:
        assert issubclass(our_error, ValueError)  # kiln.ShapeError
        return
    assert bool(our_warnings) == bool(their_warnings), (our_warnings, their_warnings)
    assert _constant_dims(ours) == _constant_dims(theirs)


@pytest.mark.parametrize("name", ["dropout1d", "dropout2d", "dropout3d"])
def test_whole_channels_dropped_and_survivors_scaled(name):
    p = 0.3
    x = np.random.default_rng(0).standard_normal(GOOD_SHAPES[name]) + 3.0  # no zeros in x
    out = getattr(F, name)(kiln.tensor(x), p).numpy()
    nonzero = (out != 0).reshape(x.shape[0], x.shape[1], -1)
    assert np.all(nonzero == nonzero[:, :, :1])  # each (sample, channel) kept or dropped whole
    np.testing.assert_allclose(out[out != 0], x[out != 0] / (1 - p), rtol=1e-12)
    assert abs(nonzero[:, :, 0].mean() - (1 - p)) < 0.1


@pytest.mark.parametrize("name", ["dropout1d", "dropout3d"])
def test_unbatched_inputs_drop_channels_on_dim_0(name):
    shape = GOOD_SHAPES[name][1:]
    out = getattr(F, name)(kiln.ones(*shape, dtype="float64"), 0.5).numpy()
    per_channel = out.reshape(shape[0], -1)
    assert np.all(per_channel == per_channel[:, :1])
    assert set(np.unique(per_channel)) <= {0.0, 2.0} and len(np.unique(per_channel)) == 2


def test_dropout2d_on_3d_input_warns_like_torch_and_reads_n_c_l():
    with pytest.warns(UserWarning, match="dropout1d"):
        out = F.dropout2d(kiln.ones(8, 16, 5, dtype="float64"), 0.5).numpy()
    assert _constant_dims(out) == {2}


def _dropped_value(out: np.ndarray) -> float:
    """The value alpha dropout gives every dropped unit: the most common value."""
    values, counts = np.unique(out, return_counts=True)
    return values[np.argmax(counts)]


def _selu_affine(lib, name: str, p: float) -> tuple[float, float, float]:
    """(a, b, dropped value): kept units become a * x + b, dropped units the dropped value."""
    x = np.linspace(-2.0, 2.0, 4001).reshape(1, -1, 1) if name == "feature_alpha_dropout" else np.linspace(-2, 2, 4001)
    out = getattr(lib.nn.functional, name)(lib.tensor(x), p, True).numpy().reshape(-1)
    x = x.reshape(-1)
    dropped = _dropped_value(out)
    kept = out != dropped
    a, b = np.polyfit(x[kept], out[kept], 1)
    np.testing.assert_allclose(out[kept], a * x[kept] + b, rtol=1e-10, atol=1e-12)  # exactly affine
    return a, b, dropped


@pytest.mark.parametrize("name", ["alpha_dropout", "feature_alpha_dropout"])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_alpha_dropout_uses_torchs_affine_map(name, p):
    np.testing.assert_allclose(_selu_affine(kiln, name, p), _selu_affine(torch, name, p), rtol=1e-9)


def test_alpha_dropout_keeps_mean_and_variance():
    x = kiln.randn(200_000, dtype="float64")
    out = nn.AlphaDropout(0.2)(x).numpy()
    assert abs(out.mean()) < 0.02 and abs(out.std() - 1.0) < 0.02
    assert abs((out == _dropped_value(out)).mean() - 0.2) < 0.01  # dropped units all take one value


def test_feature_alpha_dropout_drops_whole_channels():
    x = kiln.randn(16, 32, 5, dtype="float64")
    out = F.feature_alpha_dropout(x, 0.5, True).numpy()
    low = _dropped_value(out)
    dropped = np.all(out == low, axis=2)
    assert np.all(dropped | np.all(out != low, axis=2))
    assert 0.3 < dropped.mean() < 0.7


@pytest.mark.parametrize("cls", sorted(MODULES))
def test_eval_mode_and_p0_are_identity_p1_zeroes(cls):
    x = kiln.randn(*GOOD_SHAPES[MODULES[cls]], dtype="float64")
    layer = getattr(nn, cls)(0.5)
    assert layer.eval()(x) is x
    assert getattr(nn, cls)(0.0)(x) is x
    assert getattr(F, MODULES[cls])(x, 0.5, training=False) is x
    zero = getattr(nn, cls)(1.0)(x).numpy()
    np.testing.assert_array_equal(zero, np.zeros_like(zero))
    theirs = getattr(torch.nn, cls)(1.0)(torch.tensor(x.numpy())).numpy()
    np.testing.assert_array_equal(np.signbit(zero), np.signbit(theirs))  # x * 0 keeps signed zeros too


@pytest.mark.parametrize("cls", sorted(MODULES))
def test_signature_defaults_repr_and_bad_p_match_torch(cls):
    assert repr(getattr(nn, cls)()) == repr(getattr(torch.nn, cls)())
    assert repr(getattr(nn, cls)(0.2, True)) == repr(getattr(torch.nn, cls)(0.2, True))
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="between 0 and 1"):
            getattr(nn, cls)(bad)
        with pytest.raises(ValueError, match="between 0 and 1"):
            getattr(F, MODULES[cls])(kiln.ones(*GOOD_SHAPES[MODULES[cls]]), bad, True)
    assert isinstance(getattr(nn, cls)(), nn.modules.dropout._DropoutNd)


def test_functional_alpha_dropout_defaults_to_eval_like_torch():
    x = kiln.randn(4, 3, 5)
    assert F.alpha_dropout(x) is x and F.feature_alpha_dropout(x) is x
    assert F.dropout2d(kiln.ones(2, 3, 4, 4)).numpy().max() == 2.0  # dropoutNd defaults to training=True


@pytest.mark.parametrize("cls", sorted(MODULES))
def test_gradient_is_the_mask_times_the_scale(cls):
    p = 0.4
    x = kiln.tensor(np.random.default_rng(1).standard_normal(GOOD_SHAPES[MODULES[cls]]), requires_grad=True)
    out = getattr(nn, cls)(p)(x)
    out.sum().backward()
    y = out.detach().numpy()
    if "Alpha" in cls:
        kept = y != _dropped_value(y)
        a = 1 / math.sqrt((1 - p) * (1 + p * 1.7580993408473766 ** 2))
        np.testing.assert_allclose(x.grad.numpy(), np.where(kept, a, 0.0), rtol=1e-12)
    else:
        np.testing.assert_allclose(x.grad.numpy(), np.where(y != 0, 1 / (1 - p), 0.0), rtol=1e-12)


@pytest.mark.parametrize("name", sorted(GOOD_SHAPES))
def test_compiled_masks_equal_eager_bit_for_bit_and_change_per_call(name):
    fn = getattr(F, name)
    x = kiln.randn(*GOOD_SHAPES[name])
    compiled = kiln.compile(lambda t: fn(t, 0.5, True))
    outs = []
    for _ in range(3):
        state = kiln.get_rng_state()
        eager = fn(x, 0.5, True).numpy()
        kiln.set_rng_state(state)
        got = compiled(x).numpy()
        np.testing.assert_array_equal(got, eager)
        outs.append(got)
    assert not np.array_equal(outs[0], outs[1]) and not np.array_equal(outs[1], outs[2])
    assert compiled.stats.fallbacks == 0 and compiled.stats.hits == 2


class _Net(nn.Module):
    def __init__(self, drop: nn.Module) -> None:
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 3)
        self.drop = drop

    def forward(self, x: kiln.Tensor) -> kiln.Tensor:
        h = self.conv(x)
        return self.drop(h.reshape(h.shape[0], 4, 2, -1) if isinstance(self.drop, (nn.Dropout2d, nn.Dropout3d))
                         else h)


@pytest.mark.parametrize("cls", sorted(MODULES))
def test_modules_compile_in_train_and_eval_mode(cls):
    model = _Net(getattr(nn, cls)(0.5)).double()
    x = kiln.tensor(np.random.default_rng(2).standard_normal((2, 3, 10)), requires_grad=True)
    if cls == "Dropout3d":
        x = kiln.tensor(np.random.default_rng(2).standard_normal((2, 3, 18)), requires_grad=True)
    check_compiled(model.train(), x, calls=3)
    compiled = check_compiled(model.eval(), x, calls=2)
    np.testing.assert_array_equal(compiled(x).detach().numpy(), model(x).detach().numpy())
