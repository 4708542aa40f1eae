"""The recurrent, transposed-conv, normalization, resizing and transformer layers compile:
kiln.compile(model) gives eager's outputs and gradients, on the trace and on replays."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from compile_parity import check_compiled
from kiln.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def _x(*shape: int, dtype: str = "float64", seed: int = 0) -> kiln.Tensor:
    data = np.random.default_rng(seed).standard_normal(shape)
    return kiln.tensor(data, dtype=dtype, requires_grad=True)


RECURRENT = [
    ("RNN", dict(num_layers=2, nonlinearity="relu")),
    ("LSTM", dict(num_layers=2, bidirectional=True, batch_first=True)),
    ("LSTM", dict(proj_size=3)),
    ("GRU", dict(bidirectional=True, bias=False)),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode,kw", RECURRENT, ids=str)
def test_recurrent_layers(mode, kw, dtype):
    model = getattr(nn, mode)(4, 6, **kw).to(dtype)
    x = _x(3, 5, 4, dtype=dtype) if kw.get("batch_first") else _x(5, 3, 4, dtype=dtype)
    check_compiled(model, x, dtype=dtype)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_recurrent_initial_state_and_train_mode_dropout(mode):
    model = getattr(nn, mode)(4, 6, num_layers=2, dropout=0.5).double().train()
    rows = (2, 3, 6)
    h0 = (_x(*rows, seed=1), _x(*rows, seed=2)) if mode == "LSTM" else _x(*rows, seed=1)
    compiled = check_compiled(model, _x(5, 3, 4), h0, calls=3)
    assert compiled.stats.traces == 1


def test_packed_sequences_in_and_out():
    model = nn.LSTM(4, 6, num_layers=2, bidirectional=True).double()
    x = _x(5, 4, 4)
    packed = pack_padded_sequence(x, [2, 5, 1, 4], enforce_sorted=False)
    packed.data = packed.data.detach().requires_grad_()  # a leaf: each call differentiates it again
    compiled = check_compiled(model, packed)
    assert compiled.stats.traces == 1
    # other lengths are another packing: a new plan, keyed like a new shape
    compiled(pack_padded_sequence(x, [5, 5, 1, 4], enforce_sorted=False))
    assert compiled.stats.traces == 2 and compiled.stats.fallbacks == 0


class _Tagger(nn.Module):
    """Packs inside forward, as PyTorch scripts do: lengths are plain ints."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(4, 5, batch_first=True, bidirectional=True)
        self.head = nn.Linear(10, 3)

    def forward(self, x: kiln.Tensor, lengths: list[int]) -> kiln.Tensor:
        out, _ = self.rnn(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
        padded, _ = pad_packed_sequence(out, batch_first=True)
        return self.head(padded)


def test_packing_inside_a_compiled_forward():
    check_compiled(_Tagger().double(), _x(3, 6, 4), [4, 6, 2])


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells(name):
    model = getattr(nn, name)(4, 6).double()
    state = _x(3, 6, seed=1)
    check_compiled(model, _x(3, 4), (state, _x(3, 6, seed=2)) if name == "LSTMCell" else state)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv_transpose2d(dtype):
    model = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=(1, 2)).to(dtype)
    check_compiled(model, _x(2, 4, 5, 5, dtype=dtype), dtype=dtype)


def test_conv_transpose1d():
    check_compiled(nn.ConvTranspose1d(3, 2, 4, stride=2).double(), _x(2, 3, 6))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layer", ["group", "rms"])
def test_norms(layer, dtype):
    model = (nn.GroupNorm(2, 6) if layer == "group" else nn.RMSNorm((5,))).to(dtype)
    with kiln.no_grad():
        for p in model.parameters():
            p.copy_(kiln.randn(*p.shape, dtype=dtype))
    check_compiled(model, _x(3, 6, 4, 5, dtype=dtype), dtype=dtype)


@pytest.mark.parametrize("mode,kw", [("nearest", dict(scale_factor=2)), ("nearest", dict(size=(7, 3))),
                                     ("nearest-exact", dict(scale_factor=1.5)),
                                     ("bilinear", dict(scale_factor=2)),
                                     ("bilinear", dict(size=(7, 3), align_corners=True)),
                                     ("area", dict(size=(2, 3)))], ids=str)
def test_upsample(mode, kw):
    check_compiled(nn.Upsample(mode=mode, **kw), _x(2, 3, 4, 5))


def test_transformer_with_masks_and_dropout():
    model = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=16,
                           dropout=0.1, batch_first=True).double().train()
    mask = nn.Transformer.generate_square_subsequent_mask(5, dtype="float64")
    check_compiled(model, _x(2, 6, 8), _x(2, 5, 8, seed=1), tgt_mask=mask)


def test_decoder_layer_eval():
    model = nn.TransformerDecoderLayer(8, 2, 16, norm_first=True).double().eval()
    check_compiled(model, _x(5, 2, 8), _x(6, 2, 8, seed=1), tgt_is_causal=True)
