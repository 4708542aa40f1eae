"""MultiheadAttention, TransformerEncoderLayer and TransformerEncoder against PyTorch."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from nn_parity import check_parity

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64"]
E, H = 8, 2


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _mha_pair(**kwargs):
    return nn.MultiheadAttention(E, H, **kwargs), torch.nn.MultiheadAttention(E, H, **kwargs)


def _randomize_biases(tmod) -> None:
    """PyTorch starts MHA biases at zero; make them non-trivial so their grads are tested."""
    with torch.no_grad():
        for name, p in tmod.named_parameters():
            if "bias" in name:
                p.copy_(torch.randn(p.shape) * 0.1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("output", [0, 1], ids=["output", "weights"])
def test_self_attention(dtype, batch_first, output):
    kmod, tmod = _mha_pair(batch_first=batch_first)
    _randomize_biases(tmod)
    x = randn(2, 5, E) if batch_first else randn(5, 2, E)
    check_parity(kmod, tmod, [x, x, x], dtype, output_index=output)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_first", [True, False])
def test_cross_attention_different_lengths(dtype, batch_first):
    kmod, tmod = _mha_pair(batch_first=batch_first)
    _randomize_biases(tmod)
    if batch_first:
        q, k, v = randn(3, 4, E), randn(3, 6, E, seed=1), randn(3, 6, E, seed=2)
    else:
        q, k, v = randn(4, 3, E), randn(6, 3, E, seed=1), randn(6, 3, E, seed=2)
    check_parity(kmod, tmod, [q, k, v], dtype, output_index=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_kdim_vdim_and_no_bias(dtype):
    kmod = nn.MultiheadAttention(E, H, bias=False, kdim=5, vdim=3, batch_first=True)
    tmod = torch.nn.MultiheadAttention(E, H, bias=False, kdim=5, vdim=3, batch_first=True)
    assert list(kmod.state_dict()) == list(tmod.state_dict())
    check_parity(kmod, tmod, [randn(2, 4, E), randn(2, 6, 5, seed=1), randn(2, 6, 3, seed=2)], dtype,
                 output_index=0)


def test_unbatched_input():
    kmod, tmod = _mha_pair()
    x = randn(5, E)
    check_parity(kmod, tmod, [x, x, x], "float64", output_index=0)
    kmod2, tmod2 = _mha_pair()
    check_parity(kmod2, tmod2, [x, x, x], "float64", output_index=1)


def _causal_bool(n: int) -> np.ndarray:
    return np.triu(np.ones((n, n), dtype=bool), 1)


MASK_CASES = {
    "bool_attn_mask": lambda: dict(attn_mask=_causal_bool(5)),
    "float_attn_mask": lambda: dict(attn_mask=randn(5, 5, seed=3)),
    "3d_attn_mask": lambda: dict(attn_mask=np.random.default_rng(4).random((2 * H, 5, 5)) < 0.3),
    "key_padding_mask": lambda: dict(key_padding_mask=np.array([[False] * 5, [False, False, False, True, True]])),
    "float_key_padding_mask": lambda: dict(key_padding_mask=randn(2, 5, seed=5)),
    "both": lambda: dict(attn_mask=_causal_bool(5),
                         key_padding_mask=np.array([[False] * 4 + [True], [False] * 5])),
    "causal_with_mask": lambda: dict(attn_mask=_causal_bool(5), is_causal=True),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(MASK_CASES))
@pytest.mark.parametrize("output", [0, 1], ids=["output", "weights"])
def test_masks(dtype, case, output):
    kmod, tmod = _mha_pair(batch_first=True)
    x = randn(2, 5, E)
    kwargs = MASK_CASES[case]()
    if case == "3d_attn_mask":
        kwargs["attn_mask"][:, :, 0] = False  # every query keeps at least one key
    check_parity(kmod, tmod, [x, x, x], dtype, kwargs=kwargs, output_index=output)


def test_is_causal_without_mask_means_causal():
    kmod = nn.MultiheadAttention(E, H, batch_first=True)
    x = kiln.randn(2, 5, E)
    a, _ = kmod(x, x, x, is_causal=True)
    b, _ = kmod(x, x, x, attn_mask=kiln.tensor(_causal_bool(5)))
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_per_head_weights_and_no_weights():
    kmod, tmod = _mha_pair(batch_first=True)
    x = randn(2, 5, E)
    check_parity(kmod, tmod, [x, x, x], "float64", kwargs=dict(average_attn_weights=False), output_index=1)
    out, weights = kmod(*(kiln.tensor(x),) * 3, need_weights=False)
    assert weights is None and out.shape == (2, 5, E)


def test_weights_are_probabilities():
    mha = nn.MultiheadAttention(E, H, batch_first=True)
    x = kiln.randn(3, 4, E)
    _, w = mha(x, x, x)
    assert w.shape == (3, 4, 4)
    np.testing.assert_allclose(w.detach().numpy().sum(-1), 1.0, rtol=1e-6)


def test_dropout_inactive_in_eval_and_active_in_train():
    kmod, tmod = _mha_pair(batch_first=True, dropout=0.5)
    kmod.eval()
    tmod.eval()
    x = randn(2, 5, E)
    check_parity(kmod, tmod, [x, x, x], "float64", output_index=0)
    kmod.train()
    xk = kiln.tensor(x)
    a, _ = kmod(xk, xk, xk)
    b, _ = kmod(xk, xk, xk)
    assert np.any(a.detach().numpy() != b.detach().numpy())


def test_mha_state_dict_keys_and_init():
    kmod, tmod = _mha_pair()
    assert list(kmod.state_dict()) == list(tmod.state_dict()) == [
        "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    for key, value in tmod.state_dict().items():
        assert tuple(kmod.state_dict()[key].shape) == tuple(value.shape)
    assert not np.any(kmod.in_proj_bias.detach().numpy())
    assert not np.any(kmod.out_proj.bias.detach().numpy())
    bound = np.sqrt(6.0 / (E + 3 * E))  # xavier_uniform_ on (3E, E)
    assert np.abs(kmod.in_proj_weight.detach().numpy()).max() <= bound


def test_mha_errors():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        nn.MultiheadAttention(10, 3)
    mha = nn.MultiheadAttention(E, H, batch_first=True)
    x = kiln.randn(2, 5, E)
    with pytest.raises(ValueError, match=r"2-D attn_mask has shape \(4, 4\), expected \(L, S\) = \(5, 5\)"):
        mha(x, x, x, attn_mask=kiln.ones(4, 4, dtype="bool"))
    with pytest.raises(ValueError, match=r"key_padding_mask has shape \(5,\), expected \(N, S\)"):
        mha(x, x, x, key_padding_mask=kiln.ones(5, dtype="bool"))
    with pytest.raises(ValueError, match="embed_dim 8 features"):
        y = kiln.randn(2, 5, 6)
        mha(y, y, y)


# ---- TransformerEncoderLayer -------------------------------------------------------------------
TEL_CASES = [
    dict(),
    dict(norm_first=True),
    dict(activation="gelu"),
    dict(batch_first=True, norm_first=True, activation="gelu", layer_norm_eps=1e-6),
    dict(bias=False),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", TEL_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_encoder_layer(dtype, case):
    kwargs = dict(d_model=E, nhead=H, dim_feedforward=16, dropout=0.0, **case)
    kmod, tmod = nn.TransformerEncoderLayer(**kwargs), torch.nn.TransformerEncoderLayer(**kwargs)
    shape = (2, 5, E) if case.get("batch_first") else (5, 2, E)
    check_parity(kmod, tmod, [randn(*shape)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_encoder_layer_with_masks(dtype):
    kwargs = dict(d_model=E, nhead=H, dim_feedforward=16, dropout=0.0, batch_first=True)
    kmod, tmod = nn.TransformerEncoderLayer(**kwargs), torch.nn.TransformerEncoderLayer(**kwargs)
    masks = dict(src_mask=_causal_bool(5), src_key_padding_mask=np.array([[False] * 5, [False] * 4 + [True]]))
    check_parity(kmod, tmod, [randn(2, 5, E)], dtype, kwargs=masks)


def test_encoder_layer_eval_ignores_dropout():
    kwargs = dict(d_model=E, nhead=H, dim_feedforward=16, dropout=0.3)
    kmod, tmod = nn.TransformerEncoderLayer(**kwargs).eval(), torch.nn.TransformerEncoderLayer(**kwargs).eval()
    check_parity(kmod, tmod, [randn(5, 2, E)], "float64")


def test_encoder_layer_module_activation_and_bad_name():
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=16, activation=nn.GELU())
    assert "activation" in dict(layer.named_children())
    assert layer(kiln.randn(5, 2, E)).shape == (5, 2, E)
    with pytest.raises(ValueError, match="activation should be 'relu' or 'gelu'"):
        nn.TransformerEncoderLayer(E, H, activation="swish")


def test_encoder_layer_state_dict_matches_pytorch():
    kmod = nn.TransformerEncoderLayer(E, H, dim_feedforward=16)
    tmod = torch.nn.TransformerEncoderLayer(E, H, dim_feedforward=16)
    assert list(kmod.state_dict()) == list(tmod.state_dict())
    for key, value in tmod.state_dict().items():
        assert tuple(kmod.state_dict()[key].shape) == tuple(value.shape), key
    assert [n for n, _ in kmod.named_children()] == [n for n, _ in tmod.named_children()]


@pytest.mark.parametrize("dtype", DTYPES)
def test_encoder_stack(dtype):
    kwargs = dict(d_model=E, nhead=H, dim_feedforward=16, dropout=0.0, batch_first=True)
    kmod = nn.TransformerEncoder(nn.TransformerEncoderLayer(**kwargs), 2, norm=nn.LayerNorm(E))
    tmod = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(**kwargs), 2, norm=torch.nn.LayerNorm(E),
                                       enable_nested_tensor=False)
    assert list(kmod.state_dict()) == list(tmod.state_dict())
    assert kmod.layers[0].linear1.weight is not kmod.layers[1].linear1.weight
    check_parity(kmod, tmod, [randn(2, 5, E)], dtype)
