"""LogSigmoid, Softmin, Softshrink, Hardshrink, RReLU and Softmax2d against torch.nn.

Values and gradients (functional and module), reprs, errors, NaN and boundary handling, RReLU's
random slopes in training (drawn from kiln's stream, so compiled calls equal eager ones), and the
places the names are exported.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from compile_parity import check_compiled
from nn_parity import assert_close, check_parity

torch = pytest.importorskip("torch")
tnn = torch.nn
TF = torch.nn.functional

DTYPES = ["float32", "float64"]
# values on and around the shrink thresholds (+-0.5, +-1), zero, and large magnitudes
EDGES = np.array([-40.0, -1.0, -0.75, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, 40.0])


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape) * 1.5


def _compare_functional(ours, theirs, x: np.ndarray, dtype: str, **kwargs) -> None:
    """Our F.<op>(x, **kwargs) against torch's: the values and the input gradient."""
    kx = kiln.tensor(x, dtype=dtype, requires_grad=True)
    tx = torch.tensor(x, dtype=getattr(torch, dtype), requires_grad=True)
    k_out, t_out = ours(kx, **kwargs), theirs(tx, **kwargs)
    assert k_out.dtype.name == str(t_out.dtype).removeprefix("torch.")
    assert_close(k_out, t_out, dtype, "forward", "forward")
    upstream = np.random.default_rng(1).standard_normal(x.shape)
    (k_out * kiln.tensor(upstream, dtype=dtype)).sum().backward()
    (t_out * torch.tensor(upstream, dtype=getattr(torch, dtype))).sum().backward()
    assert_close(kx.grad, tx.grad, dtype, "grad", "input grad")


FUNCTIONAL_CASES = [
    ("logsigmoid", {}),
    ("softmin", {"dim": 1}),
    ("softmin", {"dim": 0}),
    ("softmin", {"dim": -1}),
    ("softshrink", {}),
    ("softshrink", {"lambd": 1.0}),
    ("softshrink", {"lambd": 0.0}),
    ("hardshrink", {}),
    ("hardshrink", {"lambd": 0.25}),
    ("hardshrink", {"lambd": -1.0}),
    ("rrelu", {}),
    ("rrelu", {"lower": 0.1, "upper": 0.3, "training": False}),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,kwargs", FUNCTIONAL_CASES, ids=lambda v: str(v))
def test_functional_matches_torch(name, kwargs, dtype):
    """F.<name> equals torch's on random values and on the threshold edges, forward and backward."""
    x = np.concatenate([randn(3, 11).ravel(), EDGES]).reshape(4, 11)
    _compare_functional(getattr(F, name), getattr(TF, name), x, dtype, **kwargs)


MODULE_CASES = [
    ("LogSigmoid", (), (3, 5)),
    ("Softmin", (1,), (3, 5)),
    ("Softmin", (-1,), (2, 3, 4)),
    ("Softshrink", (), (3, 5)),
    ("Softshrink", (0.8,), (2, 3, 4)),
    ("Hardshrink", (), (3, 5)),
    ("Hardshrink", (1.2,), (2, 3, 4)),
    ("RReLU", (), (3, 5)),  # compared in eval mode, where the slope is fixed
    ("RReLU", (0.05, 0.5), (2, 3, 4)),
    ("Softmax2d", (), (2, 3, 4, 5)),
    ("Softmax2d", (), (3, 4, 5)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,args,shape", MODULE_CASES, ids=lambda v: str(v))
def test_module_matches_torch(name, args, shape, dtype):
    ours, theirs = getattr(nn, name)(*args).eval(), getattr(tnn, name)(*args).eval()
    check_parity(ours, theirs, [randn(*shape)], dtype)


@pytest.mark.parametrize("name,args", [
    ("LogSigmoid", ()), ("Softmin", (1,)), ("Softmin", ()), ("Softshrink", ()), ("Softshrink", (1.0,)),
    ("Hardshrink", ()), ("Hardshrink", (0.25,)), ("RReLU", ()), ("RReLU", (0.1, 0.3)),
    ("RReLU", (0.1, 0.3, True)), ("Softmax2d", ()),
], ids=lambda v: str(v))
def test_repr_is_torchs(name, args):
    assert repr(getattr(nn, name)(*args)) == repr(getattr(tnn, name)(*args))


def test_nan_passes_through_the_shrinks_as_in_torch():
    x = np.array([np.nan, 0.5, -0.5, 0.7, -0.7, 0.0])
    for name in ("hardshrink", "softshrink", "logsigmoid", "rrelu"):
        got = getattr(F, name)(kiln.tensor(x)).numpy()
        want = getattr(TF, name)(torch.tensor(x)).numpy()
        np.testing.assert_array_equal(got, want, err_msg=name)  # NaN in the same places, same values


def test_logsigmoid_is_stable_and_its_gradient_at_zero_is_a_half():
    x = kiln.tensor([-1000.0, -30.0, 0.0, 30.0, 1000.0], requires_grad=True)
    y = F.logsigmoid(x)
    tx = torch.tensor([-1000.0, -30.0, 0.0, 30.0, 1000.0], requires_grad=True)
    ty = TF.logsigmoid(tx)
    assert np.all(np.isfinite(y.detach().numpy()))
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-6, atol=1e-30)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-30)
    assert x.grad.numpy()[2] == 0.5


def test_softmin_dtype_casts_first():
    x = randn(2, 4).astype(np.float32)
    got = F.softmin(kiln.tensor(x), dim=1, dtype="float64")
    want = TF.softmin(torch.tensor(x), dim=1, dtype=torch.float64)
    assert got.dtype == kiln.float64
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_softmin_needs_a_dim_like_kilns_softmax():
    with pytest.raises(ValueError, match="pass dim explicitly"):
        F.softmin(kiln.randn(2, 3))
    with pytest.raises(ValueError, match=r"Softmin\(dim=-1\)"):
        nn.Softmin()(kiln.randn(2, 3))


def test_softmax2d_rejects_other_ranks_with_torchs_message():
    for shape in [(3, 4), (1, 2, 3, 4, 5)]:
        with pytest.raises(ValueError) as theirs:
            tnn.Softmax2d()(torch.zeros(shape))
        with pytest.raises(ValueError) as ours:
            nn.Softmax2d()(kiln.zeros(*shape))
        assert str(ours.value) == str(theirs.value)


def test_bad_bounds_raise():
    """torch refuses lower > upper and a negative softshrink lambd (RuntimeError); kiln says ValueError."""
    with pytest.raises(RuntimeError):
        TF.rrelu(torch.zeros(3), 0.5, 0.1)
    with pytest.raises(ValueError, match="lower bound"):
        F.rrelu(kiln.zeros(3), 0.5, 0.1)
    with pytest.raises(ValueError, match="lower bound"):
        nn.RReLU(0.5, 0.1).train()(kiln.zeros(3))
    with pytest.raises(RuntimeError):
        TF.softshrink(torch.zeros(3), -1.0)
    with pytest.raises(ValueError, match="lambd must be >= 0"):
        F.softshrink(kiln.zeros(3), -1.0)


# ---- RReLU in training -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower,upper", [(1 / 8, 1 / 3), (0.2, 0.9), (0.3, 0.3)])
def test_rrelu_training_slopes_lie_in_bounds_and_are_the_gradient(lower, upper, dtype):
    x_np = np.concatenate([-np.linspace(0.1, 3.0, 400), np.linspace(0.1, 3.0, 100)])
    x = kiln.tensor(x_np, dtype=dtype, requires_grad=True)
    layer = nn.RReLU(lower, upper).train()
    y = layer(x)
    y.sum().backward()
    out, grad = y.detach().numpy(), x.grad.numpy()
    neg = x_np < 0
    slopes = out[neg] / x_np[neg].astype(dtype)
    tol = 1e-6 if dtype == "float32" else 1e-12
    assert np.all(slopes >= lower - tol) and np.all(slopes <= upper + tol)
    if upper > lower:
        assert np.unique(np.round(slopes, 6)).size > 100  # one slope per element, not one for all
    np.testing.assert_allclose(grad[neg], slopes, rtol=1e-5 if dtype == "float32" else 1e-12)
    np.testing.assert_array_equal(out[~neg], x_np[~neg].astype(dtype))
    np.testing.assert_array_equal(grad[~neg], 1.0)


def test_rrelu_training_draws_like_torch_in_distribution():
    """The slopes are uniform on [lower, upper]: mean and spread agree with torch's draws."""
    x = -np.ones(20000)
    ours = -F.rrelu(kiln.tensor(x), 0.1, 0.5, training=True).numpy()
    theirs = -TF.rrelu(torch.tensor(x), 0.1, 0.5, training=True).numpy()
    assert abs(ours.mean() - 0.3) < 0.005 and abs(theirs.mean() - 0.3) < 0.005
    assert abs(ours.std() - theirs.std()) < 0.005  # (upper - lower) / sqrt(12)


def test_rrelu_follows_kilns_seed_and_differs_per_call():
    x = -kiln.ones(64)
    kiln.manual_seed(5)
    a, b = F.rrelu(x, training=True).numpy(), F.rrelu(x, training=True).numpy()
    kiln.manual_seed(5)
    np.testing.assert_array_equal(F.rrelu(x, training=True).numpy(), a)
    assert not np.array_equal(a, b)


def test_rrelu_eval_is_leaky_relu_with_the_mean_slope():
    x = kiln.tensor(randn(4, 6))
    np.testing.assert_array_equal(nn.RReLU(0.1, 0.3).eval()(x).numpy(), F.leaky_relu(x, 0.2).numpy())
    np.testing.assert_array_equal(F.rrelu(x, 0.1, 0.3).numpy(), F.leaky_relu(x, 0.2).numpy())  # training=False


def test_compiled_training_rrelu_replays_eagers_slopes():
    """kiln.compile draws RReLU's slopes from the same stream as eager: outputs and gradients agree."""
    kiln.manual_seed(2)
    model = nn.Sequential(nn.Linear(5, 6), nn.RReLU(0.1, 0.4), nn.Linear(6, 3)).to("float64").train()
    check_compiled(model, kiln.tensor(randn(4, 5), dtype="float64", requires_grad=True), calls=3)


def test_compiled_new_activations_equal_eager():
    kiln.manual_seed(3)
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.Softshrink(0.3), nn.Hardshrink(0.1), nn.LogSigmoid(),
                          nn.Softmax2d(), nn.Softmin(dim=-1), nn.RReLU().eval()).to("float64")
    check_compiled(model, kiln.tensor(randn(2, 2, 3, 4), dtype="float64", requires_grad=True))


# ---- exports ---------------------------------------------------------------------------------
NEW_MODULES = ["LogSigmoid", "Softmin", "Softshrink", "Hardshrink", "RReLU", "Softmax2d"]
NEW_FUNCTIONS = ["logsigmoid", "softmin", "softshrink", "hardshrink", "rrelu"]


def test_the_names_are_exported_where_torch_has_them():
    import kiln.nn.modules.activation as act

    for name in NEW_MODULES:
        assert name in nn.__all__ and name in nn.modules.__all__ and name in act.__all__
        assert getattr(nn.modules, name) is getattr(nn, name) is getattr(act, name)
        assert issubclass(getattr(nn, name), nn.Module)
        assert getattr(tnn, name).__module__ == "torch.nn.modules.activation"
    for name in NEW_FUNCTIONS:
        assert name in F.__all__ and callable(getattr(F, name))
