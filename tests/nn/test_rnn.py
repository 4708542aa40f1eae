"""nn.RNN, nn.LSTM and nn.GRU against torch.nn: outputs, final states and all gradients."""
from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln.nn.utils.rnn import pack_padded_sequence
from nn_parity import assert_close
from rnn_parity import compare_modules, leaves, randn, to_both, torch_one_thread  # noqa: F401 (fixture)

torch = pytest.importorskip("torch")

# torch itself warns that oneDNN has no projected LSTM (its own fallback, not kiln's)
pytestmark = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported")

T, B, F, H = 5, 3, 4, 6
CONFIGS = [
    ("RNN", {}),
    ("RNN", {"nonlinearity": "relu", "num_layers": 2}),
    ("RNN", {"bidirectional": True, "batch_first": True}),
    ("LSTM", {}),
    ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("LSTM", {"bias": False, "batch_first": True}),
    ("LSTM", {"proj_size": 3}),
    ("LSTM", {"proj_size": 2, "num_layers": 2, "bidirectional": True, "batch_first": True}),
    ("GRU", {}),
    ("GRU", {"num_layers": 3, "bidirectional": True}),
    ("GRU", {"bias": False, "batch_first": True, "num_layers": 2}),
]


def _ids(config) -> str:
    mode, kw = config
    return mode + "".join(f"-{k}={v}" for k, v in kw.items())


def _pair(mode: str, kw: dict, dtype: str):
    kmod = getattr(nn, mode)(F, H, **kw).to(dtype)
    tmod = getattr(torch.nn, mode)(F, H, **kw).to(getattr(torch, dtype))
    return kmod, tmod


def _h0(mode: str, kw: dict, batch: int | None, seed: int = 7):
    """A random initial state, (h0,) or (h0, c0), shaped for the config."""
    rows = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
    lead = (rows, batch) if batch is not None else (rows,)
    h = randn(*lead, kw.get("proj_size") or H, seed=seed)
    if mode == "LSTM":
        return h, randn(*lead, H, seed=seed + 1)
    return h


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("with_h0", [False, True], ids=["zero_state", "given_state"])
@pytest.mark.parametrize("config", CONFIGS, ids=_ids)
def test_matches_torch(config, with_h0, dtype):
    mode, kw = config
    kmod, tmod = _pair(mode, kw, dtype)
    x = randn(B, T, F) if kw.get("batch_first") else randn(T, B, F)
    kx, tx = to_both(x, dtype)
    k_args, t_args = (kx,), (tx,)
    grads = ([kx], [tx])
    if with_h0:
        kh, th = to_both(_h0(mode, kw, B), dtype)
        k_args, t_args = (kx, kh), (tx, th)
        grads = ([kx] + leaves(kh), [tx] + leaves(th))
    compare_modules(kmod, tmod, k_args, t_args, dtype, grads)


@pytest.mark.parametrize("config", [CONFIGS[2], CONFIGS[7], CONFIGS[9]], ids=_ids)
def test_unbatched_input(config):
    mode, kw = config
    kmod, tmod = _pair(mode, kw, "float64")
    kx, tx = to_both(randn(T, F), "float64")
    kh, th = to_both(_h0(mode, kw, None), "float64")
    compare_modules(kmod, tmod, (kx, kh), (tx, th), "float64", ([kx] + leaves(kh), [tx] + leaves(th)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("enforce_sorted", [True, False])
@pytest.mark.parametrize("config", [CONFIGS[1], CONFIGS[4], CONFIGS[7], CONFIGS[9]], ids=_ids)
def test_packed_input_matches_torch(config, enforce_sorted, dtype):
    mode, kw = config
    kw = {k: v for k, v in kw.items() if k != "batch_first"}
    kmod, tmod = _pair(mode, kw, dtype)
    lengths = [5, 4, 4, 2] if enforce_sorted else [2, 5, 1, 4]
    kx, tx = to_both(randn(T, 4, F), dtype)
    kh, th = to_both(_h0(mode, kw, 4), dtype)
    k_packed = pack_padded_sequence(kx, lengths, enforce_sorted=enforce_sorted)
    t_packed = torch.nn.utils.rnn.pack_padded_sequence(tx, lengths, enforce_sorted=enforce_sorted)
    compare_modules(kmod, tmod, (k_packed, kh), (t_packed, th), dtype, ([kx] + leaves(kh), [tx] + leaves(th)))


def test_packed_output_keeps_the_packing():
    x = kiln.randn(T, 3, F)
    packed = pack_padded_sequence(x, [2, 5, 3], enforce_sorted=False)
    out, (h, c) = nn.LSTM(F, H, bidirectional=True)(packed)
    assert isinstance(out, nn.utils.rnn.PackedSequence)
    assert out.sizes == packed.sizes
    assert out.batch_sizes.tolist() == packed.batch_sizes.tolist()
    assert out.sorted_indices.tolist() == packed.sorted_indices.tolist()
    assert tuple(out.data.shape) == (10, 2 * H) and tuple(h.shape) == (2, 3, H)


# ---- parameters and init ------------------------------------------------------------------------
@pytest.mark.parametrize("config", CONFIGS, ids=_ids)
def test_parameter_names_and_shapes_match_torch(config):
    mode, kw = config
    kmod, tmod = _pair(mode, kw, "float32")
    k_sd, t_sd = kmod.state_dict(), tmod.state_dict()
    assert list(k_sd) == list(t_sd)
    assert [tuple(v.shape) for v in k_sd.values()] == [tuple(v.shape) for v in t_sd.values()]
    assert [[tuple(p.shape) for p in group] for group in kmod.all_weights] == \
        [[tuple(p.shape) for p in group] for group in tmod.all_weights]


@pytest.mark.parametrize("mode", ["RNN", "LSTM", "GRU"])
def test_init_is_uniform_in_one_over_sqrt_hidden(mode):
    hidden = 64
    kmod = getattr(nn, mode)(32, hidden, num_layers=2)
    bound = 1 / math.sqrt(hidden)
    values = np.concatenate([p.detach().numpy().ravel() for p in kmod.parameters()])
    assert np.all(np.abs(values) <= bound)
    # U(-b, b): mean 0 and standard deviation b / sqrt(3)
    assert abs(values.mean()) < 0.05 * bound
    assert abs(values.std() - bound / math.sqrt(3)) < 0.05 * bound
    before = kmod.weight_hh_l1.detach().numpy().copy()
    kmod.reset_parameters()
    assert not np.allclose(before, kmod.weight_hh_l1.detach().numpy())


def test_init_follows_manual_seed():
    kiln.manual_seed(3)
    a = nn.GRU(4, 5).weight_ih_l0.detach().numpy()
    kiln.manual_seed(3)
    np.testing.assert_array_equal(nn.GRU(4, 5).weight_ih_l0.detach().numpy(), a)


def test_repr_matches_torch():
    kw = {"num_layers": 2, "batch_first": True, "bidirectional": True}
    assert repr(nn.LSTM(4, 6, proj_size=3, **kw)) == repr(torch.nn.LSTM(4, 6, proj_size=3, **kw))
    assert repr(nn.GRU(4, 6, bias=False)) == repr(torch.nn.GRU(4, 6, bias=False))


def test_flatten_parameters_is_accepted():
    lstm = nn.LSTM(4, 6)
    assert lstm.flatten_parameters() is None


# ---- dropout between layers ----------------------------------------------------------------------
def test_dropout_is_off_in_eval_mode():
    kmod, tmod = _pair("LSTM", {"num_layers": 2, "dropout": 0.5}, "float64")
    kmod.eval()
    tmod.eval()
    kx, tx = to_both(randn(T, B, F), "float64")
    compare_modules(kmod, tmod, (kx,), (tx,), "float64", ([kx], [tx]))


@pytest.mark.parametrize("mode", ["RNN", "LSTM", "GRU"])
def test_dropout_one_zeroes_the_next_layers_input(mode):
    """With p=1 the second layer sees zeros: it equals a 1-layer torch module run on zeros."""
    kmod = getattr(nn, mode)(F, H, num_layers=2, dropout=1.0, bidirectional=True).double()
    h0 = _h0(mode, {"num_layers": 2, "bidirectional": True}, B)
    kh = tuple(kiln.tensor(h) for h in h0) if mode == "LSTM" else kiln.tensor(h0)
    out, _ = kmod(kiln.tensor(randn(T, B, F)), kh)
    tmod = getattr(torch.nn, mode)(2 * H, H, bidirectional=True).double()
    with torch.no_grad():
        for name, p in tmod.named_parameters():
            p.copy_(torch.tensor(getattr(kmod, name.replace("_l0", "_l1")).detach().numpy()))
        th = tuple(torch.tensor(h[2:]) for h in h0) if mode == "LSTM" else torch.tensor(h0[2:])
        want, _ = tmod(torch.zeros(T, B, 2 * H, dtype=torch.float64), th)
    assert_close(out, want, "float64")


def test_dropout_masks_follow_the_seed_and_change_per_call():
    lstm = nn.LSTM(F, H, num_layers=2, dropout=0.5)
    x = kiln.randn(T, B, F)
    kiln.manual_seed(5)
    a = lstm(x)[0].detach().numpy()
    b = lstm(x)[0].detach().numpy()
    kiln.manual_seed(5)
    np.testing.assert_array_equal(lstm(x)[0].detach().numpy(), a)
    assert not np.allclose(a, b)
    lstm.eval()
    c = lstm(x)[0].detach().numpy()
    assert not np.allclose(a, c)


def test_dropout_with_one_layer_warns():
    with pytest.warns(UserWarning, match="num_layers=1"):
        nn.GRU(4, 5, dropout=0.2)


# ---- bad input --------------------------------------------------------------------------------
def test_wrong_feature_size_says_what_was_expected():
    with pytest.raises(kiln.ShapeError, match="input_size=4"):
        nn.LSTM(4, 6)(kiln.randn(5, 3, 7))


def test_wrong_rank_is_rejected():
    with pytest.raises(kiln.ShapeError, match="2-D .* or 3-D"):
        nn.GRU(4, 6)(kiln.randn(2, 5, 3, 4))


def test_wrong_initial_state_shape():
    with pytest.raises(kiln.ShapeError, match=r"expected h_0 of shape \(2, 3, 6\)"):
        nn.RNN(4, 6, num_layers=2)(kiln.randn(5, 3, 4), kiln.randn(1, 3, 6))
    with pytest.raises(kiln.ShapeError, match=r"expected c_0 of shape \(1, 3, 6\)"):
        nn.LSTM(4, 6, proj_size=2)(kiln.randn(5, 3, 4), (kiln.randn(1, 3, 2), kiln.randn(1, 3, 2)))


def test_lstm_state_must_be_a_pair():
    with pytest.raises(TypeError, match=r"tuple \(h_0, c_0\)"):
        nn.LSTM(4, 6)(kiln.randn(5, 3, 4), kiln.randn(1, 3, 6))


def test_dtype_mismatch_names_both_dtypes_and_the_fix():
    with pytest.raises(TypeError, match="float64 but the weights are float32"):
        nn.GRU(4, 6)(kiln.randn(5, 3, 4, dtype="float64"))


def test_empty_sequence_is_rejected():
    with pytest.raises(kiln.ShapeError, match="no time steps"):
        nn.RNN(4, 6)(kiln.randn(0, 3, 4))


@pytest.mark.parametrize("kwargs,match", [
    ({"nonlinearity": "sigmoid"}, "nonlinearity"),
    ({"dropout": 1.5}, "dropout"),
    ({"num_layers": 0}, "num_layers"),
])
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        nn.RNN(4, 6, **kwargs)


def test_proj_size_must_be_smaller_than_hidden():
    with pytest.raises(ValueError, match="proj_size"):
        nn.LSTM(4, 6, proj_size=6)


# ---- speed: the per-step work stays small -----------------------------------------------------
def test_tiny_lstm_language_model_learns():
    kiln.manual_seed(0)
    vocab, steps = 12, 16
    emb, lstm, head = nn.Embedding(vocab, 16), nn.LSTM(16, 32, batch_first=True), nn.Linear(32, vocab)
    params = list(emb.parameters()) + list(lstm.parameters()) + list(head.parameters())
    opt = kiln.optim.Adam(params, lr=0.02)
    seq = np.tile(np.arange(vocab), 4)  # a repeating pattern: the next token is predictable
    starts = np.arange(8)
    x = kiln.tensor(np.stack([seq[s:s + steps] for s in starts]))
    y = kiln.tensor(np.stack([seq[s + 1:s + steps + 1] for s in starts]))
    losses = []
    for _ in range(40):
        logits = head(lstm(emb(x))[0])
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]
