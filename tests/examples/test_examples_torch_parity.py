"""Each example's model, loss and training step, imported from the script, train as PyTorch's do.

PyTorch gets a twin of each model built from torch.nn (the same layers, so the same
state-dict names), loads the kiln model's initial weights with ``strict=True``, sees the same
batches and takes the same optimizer steps. The per-step losses must match, tightly in
float64 (the final weights too) and within float32 rounding in float32. The kiln side runs the way
the script does (compiled) and eagerly.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from example_scripts import load_example

torch = pytest.importorskip("torch")
tnn = torch.nn

TOL = {"float64": dict(rtol=1e-9, atol=1e-11), "float32": dict(rtol=1e-5, atol=1e-6)}


@pytest.fixture(autouse=True)
def torch_one_thread():
    """torch on one thread: its kernels slow down badly when threads fight over shared cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def to_torch(t: kiln.Tensor):
    return torch.from_numpy(np.array(t.detach().numpy()))


def load_into_torch(tmodel, kmodel: kiln.nn.Module) -> None:
    """The kiln model's weights into its torch twin: every name and shape must match."""
    tmodel.load_state_dict({k: to_torch(v) for k, v in kmodel.state_dict().items()}, strict=True)


def assert_same_training(klosses, tlosses, kmodel, tmodel, dtype: str) -> None:
    """Same per-step losses; in float64 the same final weights too. (In float32 Adam turns rounding
    noise in gradients that are zero in exact arithmetic, such as attention's key bias, into
    lr-sized steps, so float32 weights are not comparable element by element.)"""
    np.testing.assert_allclose(klosses, tlosses, **TOL[dtype], err_msg="per-step losses")
    if dtype != "float64":
        return
    tstate = tmodel.state_dict()
    for name, value in kmodel.state_dict().items():
        np.testing.assert_allclose(value.numpy(), tstate[name].numpy(), **TOL[dtype], err_msg=name)


class TorchCharGPT(tnn.Module):
    """char_gpt.CharGPT in torch.nn."""

    def __init__(self, vocab_size, block_size, d_model, n_head, n_layer):
        super().__init__()
        self.tok_emb = tnn.Embedding(vocab_size, d_model)
        self.pos_emb = tnn.Embedding(block_size, d_model)
        layer = tnn.TransformerEncoderLayer(d_model, n_head, 4 * d_model, 0.0, activation="gelu",
                                            batch_first=True, norm_first=True)
        self.blocks = tnn.TransformerEncoder(layer, n_layer, norm=tnn.LayerNorm(d_model), enable_nested_tensor=False)
        self.head = tnn.Linear(d_model, vocab_size)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(t))
        mask = tnn.Transformer.generate_square_subsequent_mask(t)
        return self.head(self.blocks(x, mask=mask, is_causal=True))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_char_gpt_trains_like_torch(dtype, compiled):
    gpt = load_example("char_gpt")
    data, chars = gpt.load_text()
    kiln.manual_seed(0)
    kmodel = gpt.CharGPT(len(chars), block_size=16, d_model=16, n_head=2, n_layer=2, dropout=0.0).to(dtype)
    tmodel = TorchCharGPT(len(chars), 16, 16, 2, 2).to(getattr(torch, dtype))
    load_into_torch(tmodel, kmodel)
    kopt = kiln.optim.AdamW(kmodel.parameters(), lr=3e-3, weight_decay=0.01)
    topt = torch.optim.AdamW(tmodel.parameters(), lr=3e-3, weight_decay=0.01)
    step_model = kiln.compile(kmodel) if compiled else kmodel
    batches = gpt.get_batch(data, 4, 16, generator=kiln.Generator(1)), gpt.get_batch(data, 4, 16, kiln.Generator(2))
    klosses, tlosses = [], []
    for step in range(4):
        x, y = batches[step % 2]
        loss = gpt.loss_fn(step_model, x, y)
        kopt.zero_grad()
        loss.backward()
        kopt.step()
        klosses.append(loss.item())
        logits = tmodel(to_torch(x))
        tloss = tnn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), to_torch(y).reshape(-1))
        topt.zero_grad()
        tloss.backward()
        topt.step()
        tlosses.append(tloss.item())
    assert_same_training(klosses, tlosses, kmodel, tmodel, dtype)
    assert klosses[-1] < klosses[0]
    if compiled:
        assert step_model.stats.traces == 1 and step_model.stats.fallbacks == 0


class TorchLSTMLM(tnn.Module):
    """lstm_lm.LSTMLM in torch.nn (dropout 0)."""

    def __init__(self, vocab_size, emb_size, hidden_size, num_layers):
        super().__init__()
        self.embed = tnn.Embedding(vocab_size, emb_size)
        self.lstm = tnn.LSTM(emb_size, hidden_size, num_layers, batch_first=True)
        self.head = tnn.Linear(hidden_size, vocab_size)

    def forward(self, x, state):
        out, state = self.lstm(self.embed(x), state)
        return self.head(out), state


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_lstm_lm_compiled_train_step_trains_like_torch(dtype):
    lm = load_example("lstm_lm")
    data, chars = lm.load_text()
    kiln.manual_seed(0)
    kmodel = lm.LSTMLM(len(chars), emb_size=8, hidden_size=16, num_layers=2, dropout=0.0).to(dtype)
    tmodel = TorchLSTMLM(len(chars), 8, 16, 2).to(getattr(torch, dtype))
    load_into_torch(tmodel, kmodel)
    kopt = kiln.optim.AdamW(kmodel.parameters(), lr=1e-2)
    topt = torch.optim.AdamW(tmodel.parameters(), lr=1e-2)
    train_step = lm.make_train_step(kmodel, kopt, clip=0.1)       # the script's compiled whole step
    streams = lm.batchify(data[:400], 4)
    kstate = tuple(s.to(dtype) for s in lm.init_state(kmodel, 4))
    tstate = tuple(to_torch(s) for s in kstate)
    klosses, tlosses, tnorms = [], [], []
    for x, y in list(lm.chunks(streams, 8))[:5]:              # the state carries over, detached
        loss, kstate = train_step(x, y, kstate)
        klosses.append(loss.item())
        logits, (h, c) = tmodel(to_torch(x), tstate)
        tloss = tnn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), to_torch(y).reshape(-1))
        topt.zero_grad()
        tloss.backward()
        tnorms.append(tnn.utils.clip_grad_norm_(tmodel.parameters(), 0.1).item())
        topt.step()
        tstate = (h.detach(), c.detach())
        tlosses.append(tloss.item())
    assert min(tnorms) > 0.1, "the clip is exercised: every gradient norm is above it"
    assert_same_training(klosses, tlosses, kmodel, tmodel, dtype)
    for k, t in zip(kstate, tstate):
        np.testing.assert_allclose(k.numpy(), t.numpy(), **TOL[dtype])
    assert train_step.stats.fallbacks == 0 and train_step.stats.hits >= 3


def torch_cnn() -> tnn.Module:
    """cnn_digits.build_model in torch.nn (dropout 0): the same Sequential indices, so the same names."""
    return tnn.Sequential(
        tnn.Conv2d(1, 16, 3, padding=1), tnn.ReLU(), tnn.MaxPool2d(2),
        tnn.Conv2d(16, 32, 3, padding=1), tnn.ReLU(), tnn.MaxPool2d(2),
        tnn.Flatten(), tnn.Dropout(0.0), tnn.Linear(32 * 2 * 2, 10),
    )


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cnn_digits_trains_like_torch(dtype, compiled):
    cnn = load_example("cnn_digits")
    images, labels = kiln.data.load_digits("train")
    kiln.manual_seed(0)
    kmodel = cnn.build_model(dropout=0.0).to(dtype)
    tmodel = torch_cnn().to(getattr(torch, dtype))
    load_into_torch(tmodel, kmodel)
    kopt = kiln.optim.SGD(kmodel.parameters(), lr=0.05, momentum=0.9)
    topt = torch.optim.SGD(tmodel.parameters(), lr=0.05, momentum=0.9)
    step_model = kiln.compile(kmodel) if compiled else kmodel
    loader = kiln.utils.data.DataLoader((images[:192].to(dtype), labels[:192]), batch_size=32, shuffle=True, seed=0)
    klosses, tlosses = [], []
    for x, y in loader:
        loss = kiln.nn.functional.cross_entropy(step_model(x), y)
        kopt.zero_grad()
        loss.backward()
        kopt.step()
        klosses.append(loss.item())
        tloss = tnn.functional.cross_entropy(tmodel(to_torch(x)), to_torch(y))
        topt.zero_grad()
        tloss.backward()
        topt.step()
        tlosses.append(tloss.item())
    assert len(klosses) == 6
    assert_same_training(klosses, tlosses, kmodel, tmodel, dtype)
    if compiled:
        assert step_model.stats.traces == 1 and step_model.stats.fallbacks == 0
