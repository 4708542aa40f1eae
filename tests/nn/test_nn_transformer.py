"""nn.TransformerDecoderLayer, nn.TransformerDecoder and nn.Transformer against torch.nn."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from nn_parity import check_parity
from rnn_parity import torch_one_thread  # noqa: F401 (fixture)

torch = pytest.importorskip("torch")

# torch's own note about its nested-tensor fast path, not about kiln
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")

DTYPES = ["float32", "float64"]
E, H = 8, 2


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _causal_float(n: int) -> np.ndarray:
    return np.triu(np.full((n, n), -np.inf), 1)


LAYER_CASES = [
    dict(),
    dict(norm_first=True),
    dict(activation="gelu", batch_first=True),
    dict(batch_first=True, norm_first=True, layer_norm_eps=1e-6, bias=False),
]


def _case_id(case: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in case.items()) or "default"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", LAYER_CASES, ids=_case_id)
def test_decoder_layer(dtype, case):
    kwargs = dict(d_model=E, nhead=H, dim_feedforward=16, dropout=0.0, **case)
    kmod, tmod = nn.TransformerDecoderLayer(**kwargs), torch.nn.TransformerDecoderLayer(**kwargs)
    assert list(kmod.state_dict()) == list(tmod.state_dict())
    bf = case.get("batch_first")
    tgt, mem = (randn(2, 5, E), randn(2, 6, E, seed=1)) if bf else (randn(5, 2, E), randn(6, 2, E, seed=1))
    check_parity(kmod, tmod, [tgt, mem], dtype, kwargs=dict(tgt_mask=_causal_float(5)))


MASK_CASES = {
    "bool_tgt_mask": lambda: dict(tgt_mask=np.triu(np.ones((5, 5), dtype=bool), 1)),
    "padding": lambda: dict(tgt_key_padding_mask=np.array([[False] * 5, [False] * 3 + [True] * 2]),
                            memory_key_padding_mask=np.array([[False] * 6, [False] * 4 + [True] * 2])),
    "memory_mask": lambda: dict(memory_mask=np.random.default_rng(2).random((5, 6)) < 0.3),
}


@pytest.mark.parametrize("case", sorted(MASK_CASES))
def test_decoder_layer_masks(case):
    kwargs = dict(d_model=E, nhead=H, dim_feedforward=16, dropout=0.0, batch_first=True)
    kmod, tmod = nn.TransformerDecoderLayer(**kwargs), torch.nn.TransformerDecoderLayer(**kwargs)
    masks = MASK_CASES[case]()
    if "memory_mask" in masks:
        masks["memory_mask"][:, 0] = False  # every query keeps at least one key
    check_parity(kmod, tmod, [randn(2, 5, E), randn(2, 6, E, seed=1)], "float64", kwargs=masks)


@pytest.mark.parametrize("with_norm", [False, True])
def test_decoder_stack(with_norm):
    kw = dict(d_model=E, nhead=H, dim_feedforward=16, dropout=0.0)
    kmod = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), 2, nn.LayerNorm(E) if with_norm else None)
    tmod = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(**kw), 2,
                                       torch.nn.LayerNorm(E) if with_norm else None)
    assert list(kmod.state_dict()) == list(tmod.state_dict())
    check_parity(kmod, tmod, [randn(5, 2, E), randn(6, 2, E, seed=1)], "float64",
                 kwargs=dict(tgt_mask=_causal_float(5), tgt_is_causal=True))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", [dict(), dict(batch_first=True, norm_first=True, activation="gelu")], ids=_case_id)
def test_transformer(dtype, case):
    kw = dict(d_model=E, nhead=H, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=16, dropout=0.0,
              **case)
    kmod, tmod = nn.Transformer(**kw), torch.nn.Transformer(**kw)
    assert list(kmod.state_dict()) == list(tmod.state_dict())
    bf = case.get("batch_first")
    src, tgt = (randn(2, 6, E), randn(2, 5, E, seed=1)) if bf else (randn(6, 2, E), randn(5, 2, E, seed=1))
    pad = np.array([[False] * 6, [False] * 4 + [True] * 2])
    masks = dict(tgt_mask=nn.Transformer.generate_square_subsequent_mask(5).numpy(), src_key_padding_mask=pad,
                 memory_key_padding_mask=pad)
    check_parity(kmod, tmod, [src, tgt], dtype, kwargs=masks)


def test_transformer_parts_and_init():
    model = nn.Transformer(d_model=E, nhead=H, num_encoder_layers=2, num_decoder_layers=3, dim_feedforward=16)
    assert isinstance(model.encoder, nn.TransformerEncoder) and isinstance(model.decoder, nn.TransformerDecoder)
    assert len(model.encoder.layers) == 2 and len(model.decoder.layers) == 3
    assert isinstance(model.encoder.norm, nn.LayerNorm) and isinstance(model.decoder.norm, nn.LayerNorm)
    w = model.decoder.layers[0].linear1.weight.detach().numpy()  # (16, 8): xavier bound sqrt(6 / 24)
    assert np.abs(w).max() <= np.sqrt(6 / (16 + E)) and np.abs(w).max() > 0.5 * np.sqrt(6 / (16 + E))
    # every stacked layer starts from its own draw, not a copy of the first
    a = model.encoder.layers[0].linear1.weight.detach().numpy()
    b = model.encoder.layers[1].linear1.weight.detach().numpy()
    assert not np.allclose(a, b)


def test_custom_encoder_and_decoder():
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, 16), 1)
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, 16), 1)
    model = nn.Transformer(E, H, custom_encoder=enc, custom_decoder=dec)
    assert model.encoder is enc and model.decoder is dec
    assert model(kiln.randn(6, 2, E), kiln.randn(5, 2, E)).shape == (5, 2, E)


def test_square_subsequent_mask_matches_torch():
    got = nn.Transformer.generate_square_subsequent_mask(4).numpy()
    np.testing.assert_array_equal(got, torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())
    assert nn.Transformer.generate_square_subsequent_mask(3, dtype="float64").dtype == kiln.float64


def test_transformer_errors():
    model = nn.Transformer(E, H, 1, 1, 16, batch_first=True)
    with pytest.raises(kiln.ShapeError, match="same batch size"):
        model(kiln.randn(2, 6, E), kiln.randn(3, 5, E))
    with pytest.raises(kiln.ShapeError, match="d_model=8"):
        model(kiln.randn(2, 6, 4), kiln.randn(2, 5, 4))
    with pytest.raises(ValueError, match="activation should be"):
        nn.TransformerDecoderLayer(E, H, activation="tanh")
