"""Every kiln.nn layer against torch.nn on CPU: forward, input grads and parameter grads."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from nn_parity import assert_close, check_parity

torch = pytest.importorskip("torch")
tnn = torch.nn

DTYPES = ["float32", "float64"]


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 5), (5,), (1, 5)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(dtype, shape, bias):
    check_parity(nn.Linear(5, 3, bias=bias), tnn.Linear(5, 3, bias=bias), [randn(*shape)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lead", [(6,), (2, 3)])
def test_bilinear(dtype, lead):
    inputs = [randn(*lead, 5), randn(*lead, 4, seed=1)]
    check_parity(nn.Bilinear(5, 4, 3), tnn.Bilinear(5, 4, 3), inputs, dtype)


CONV2D_CASES = [
    dict(in_channels=3, out_channels=6, kernel_size=3),
    dict(in_channels=3, out_channels=6, kernel_size=3, stride=2, padding=1),
    dict(in_channels=4, out_channels=6, kernel_size=(2, 3), stride=(1, 2), padding=(1, 0), bias=False),
    dict(in_channels=4, out_channels=8, kernel_size=3, dilation=2, groups=2),
    dict(in_channels=4, out_channels=4, kernel_size=3, groups=4, padding="same"),
    dict(in_channels=3, out_channels=5, kernel_size=(2, 4), padding="same", dilation=(1, 2)),
    dict(in_channels=3, out_channels=5, kernel_size=4, padding="same"),
    dict(in_channels=3, out_channels=5, kernel_size=3, padding="valid"),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONV2D_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_conv2d(dtype, case):
    x = randn(2, case["in_channels"], 9, 8)
    check_parity(nn.Conv2d(**case), tnn.Conv2d(**case), [x], dtype)


def test_conv2d_unbatched():
    check_parity(nn.Conv2d(3, 4, 3), tnn.Conv2d(3, 4, 3), [randn(3, 7, 7)], "float64")


CONV1D_CASES = [
    dict(in_channels=3, out_channels=6, kernel_size=3),
    dict(in_channels=4, out_channels=6, kernel_size=4, stride=2, padding=1, bias=False),
    dict(in_channels=4, out_channels=8, kernel_size=3, dilation=2, groups=2),
    dict(in_channels=3, out_channels=5, kernel_size=4, padding="same"),
    dict(in_channels=3, out_channels=5, kernel_size=3, padding="same", dilation=3),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONV1D_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_conv1d(dtype, case):
    x = randn(2, case["in_channels"], 11)
    check_parity(nn.Conv1d(**case), tnn.Conv1d(**case), [x], dtype)


POOL_CASES = [
    ("MaxPool2d", dict(kernel_size=2)),
    ("MaxPool2d", dict(kernel_size=3, stride=2, padding=1)),
    ("MaxPool2d", dict(kernel_size=(2, 3), stride=(2, 1), dilation=(1, 2))),
    ("AvgPool2d", dict(kernel_size=2)),
    ("AvgPool2d", dict(kernel_size=3, stride=2, padding=1)),
    ("AvgPool2d", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ("AdaptiveAvgPool2d", dict(output_size=1)),
    ("AdaptiveAvgPool2d", dict(output_size=(3, 2))),
    ("AdaptiveAvgPool2d", dict(output_size=(None, 4))),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,kwargs", POOL_CASES, ids=lambda v: str(v))
def test_pooling(dtype, name, kwargs):
    x = randn(2, 3, 9, 8)
    check_parity(getattr(nn, name)(**kwargs), getattr(tnn, name)(**kwargs), [x], dtype)


ACTIVATIONS = [
    ("ReLU", {}), ("LeakyReLU", {}), ("LeakyReLU", {"negative_slope": 0.2}), ("GELU", {}),
    ("GELU", {"approximate": "tanh"}), ("SiLU", {}), ("Tanh", {}), ("Sigmoid", {}), ("Softplus", {}),
    ("Softmax", {"dim": -1}), ("Softmax", {"dim": 1}), ("LogSoftmax", {"dim": -1}), ("LogSoftmax", {"dim": 0}),
    ("Identity", {}), ("Flatten", {}), ("Flatten", {"start_dim": 0, "end_dim": 1}),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,kwargs", ACTIVATIONS, ids=lambda v: str(v))
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 1, 4)])
def test_activation_layers(dtype, name, kwargs, shape):
    check_parity(getattr(nn, name)(**kwargs), getattr(tnn, name)(**kwargs), [randn(*shape)], dtype)


def test_unflatten():
    check_parity(nn.Unflatten(1, (2, 3)), tnn.Unflatten(1, (2, 3)), [randn(4, 6, 2)], "float64")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,normalized", [((4, 6), 6), ((2, 3, 6), (6,)), ((2, 3, 4), (3, 4))])
@pytest.mark.parametrize("affine", [dict(), dict(elementwise_affine=False), dict(bias=False)],
                         ids=["affine", "no_affine", "no_bias"])
def test_layer_norm(dtype, shape, normalized, affine):
    kmod, tmod = nn.LayerNorm(normalized, **affine), tnn.LayerNorm(normalized, **affine)
    if affine.get("elementwise_affine", True):
        with torch.no_grad():  # non-trivial affine parameters
            tmod.weight.copy_(torch.randn(tmod.weight.shape))
            if tmod.bias is not None:
                tmod.bias.copy_(torch.randn(tmod.bias.shape))
    check_parity(kmod, tmod, [randn(*shape)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
@pytest.mark.parametrize("shape", [(7,), (3, 5)])
def test_embedding(dtype, padding_idx, shape):
    idx = np.random.default_rng(0).integers(0, 10, shape)
    idx.flat[0] = 2  # the padding row is looked up at least once
    idx.flat[-1] = 9
    check_parity(nn.Embedding(10, 4, padding_idx=padding_idx), tnn.Embedding(10, 4, padding_idx=padding_idx),
                 [idx], dtype)


def test_embedding_init_zeroes_padding_row():
    emb = nn.Embedding(6, 3, padding_idx=4)
    assert np.all(emb.weight.detach().numpy()[4] == 0)
    assert np.any(emb.weight.detach().numpy()[3] != 0)


def test_embedding_from_pretrained():
    w = kiln.randn(5, 3)
    emb = nn.Embedding.from_pretrained(w)
    assert not emb.weight.requires_grad
    np.testing.assert_array_equal(emb(kiln.tensor([4, 0])).numpy(), w.numpy()[[4, 0]])


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_eval_is_identity(dtype):
    drop = nn.Dropout(0.5).eval()
    x = kiln.randn(100, dtype=dtype)
    assert drop(x) is x


def test_dropout_train_zeroes_and_rescales():
    drop = nn.Dropout(0.25)
    out = drop(kiln.ones(20000)).numpy()
    kept = out != 0
    np.testing.assert_allclose(out[kept], 1 / 0.75, rtol=1e-6)
    assert abs(kept.mean() - 0.75) < 0.02


def test_dropout_uses_global_rng():
    drop = nn.Dropout(0.5)
    kiln.manual_seed(3)
    a = drop(kiln.ones(64)).numpy()
    b = drop(kiln.ones(64)).numpy()
    kiln.manual_seed(3)
    np.testing.assert_array_equal(drop(kiln.ones(64)).numpy(), a)
    assert np.any(a != b)


def test_dropout_rejects_bad_p():
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)


# ---- losses ------------------------------------------------------------------------------
LOSS_CASES = [
    ("CrossEntropyLoss", {}, "classes"),
    ("CrossEntropyLoss", {"reduction": "sum"}, "classes"),
    ("CrossEntropyLoss", {"reduction": "none"}, "classes"),
    ("CrossEntropyLoss", {"label_smoothing": 0.1}, "classes"),
    ("CrossEntropyLoss", {"ignore_index": 1}, "classes"),
    ("CrossEntropyLoss", {"weight": "w"}, "classes"),
    ("CrossEntropyLoss", {}, "probs"),
    ("NLLLoss", {}, "classes"),
    ("NLLLoss", {"reduction": "sum", "weight": "w"}, "classes"),
    ("MSELoss", {}, "same"),
    ("MSELoss", {"reduction": "none"}, "same"),
    ("L1Loss", {}, "same"),
    ("BCEWithLogitsLoss", {}, "binary"),
    ("BCEWithLogitsLoss", {"pos_weight": "pw"}, "binary"),
]


def _loss_target(kind: str, rng: np.random.Generator, n: int, c: int) -> np.ndarray:
    if kind == "classes":
        return rng.integers(0, c, (n,))
    if kind == "probs":
        p = rng.random((n, c))
        return p / p.sum(1, keepdims=True)
    if kind == "binary":
        return (rng.random((n, c)) > 0.5).astype(np.float64)
    return rng.standard_normal((n, c))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,kwargs,kind", LOSS_CASES, ids=lambda v: str(v))
def test_losses(dtype, name, kwargs, kind):
    rng = np.random.default_rng(0)
    n, c = 6, 4
    x = rng.standard_normal((n, c))
    if name == "NLLLoss":
        x = x - np.log(np.exp(x).sum(1, keepdims=True))
    target = _loss_target(kind, rng, n, c)
    k_kwargs, t_kwargs = dict(kwargs), dict(kwargs)
    for key in ("weight", "pos_weight"):
        if key in kwargs:
            w = rng.random(c) + 0.5
            k_kwargs[key] = kiln.tensor(w, dtype=dtype)
            t_kwargs[key] = torch.tensor(w, dtype=getattr(torch, dtype))
    k_target = kiln.tensor(target, dtype=dtype if target.dtype.kind == "f" else None)
    t_target = torch.tensor(target, dtype=getattr(torch, dtype) if target.dtype.kind == "f" else None)
    kx = kiln.tensor(x, dtype=dtype, requires_grad=True)
    tx = torch.tensor(x, dtype=getattr(torch, dtype), requires_grad=True)
    k_loss = getattr(nn, name)(**k_kwargs)(kx, k_target)
    t_loss = getattr(tnn, name)(**t_kwargs)(tx, t_target)
    assert_close(k_loss, t_loss, dtype)
    k_loss.sum().backward()
    t_loss.sum().backward()
    assert_close(kx.grad, tx.grad, dtype, "grad")


def test_loss_rejects_bad_reduction():
    with pytest.raises(ValueError, match="reduction must be one of"):
        nn.MSELoss(reduction="avg")


def test_loss_weight_is_a_buffer():
    loss = nn.CrossEntropyLoss(weight=kiln.ones(3))
    assert list(loss.state_dict()) == list(tnn.CrossEntropyLoss(weight=torch.ones(3)).state_dict())
    assert list(nn.CrossEntropyLoss().state_dict()) == []
