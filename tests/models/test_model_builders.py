"""kiln.models: output shapes, state-dict names, and parity with equivalent PyTorch models."""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest

import kiln
import kiln.models as models
import kiln.nn as nn

torch = pytest.importorskip("torch")
tnn = torch.nn


def _copy(kmod: nn.Module, tmod) -> None:
    kmod.load_state_dict({k: v.detach().numpy() for k, v in tmod.state_dict().items()})


def _assert_same_structure(kmod: nn.Module, tmod) -> None:
    k_sd, t_sd = kmod.state_dict(), tmod.state_dict()
    assert list(k_sd) == list(t_sd)
    for key, value in t_sd.items():
        assert tuple(k_sd[key].shape) == tuple(value.shape), key


def _compare(kmod: nn.Module, tmod, k_in: kiln.Tensor, t_in, rtol: float, atol: float) -> None:
    """Forward outputs and, through a random upstream gradient, every parameter's grad."""
    k_out, t_out = kmod(k_in), tmod(t_in)
    np.testing.assert_allclose(k_out.detach().numpy(), t_out.detach().numpy(), rtol=rtol, atol=atol)
    upstream = np.random.default_rng(0).standard_normal(tuple(t_out.shape))
    (k_out * kiln.tensor(upstream, dtype=k_out.dtype)).sum().backward()
    (t_out * torch.tensor(upstream, dtype=t_out.dtype)).sum().backward()
    k_params = dict(kmod.named_parameters())
    for name, tp in tmod.named_parameters():
        np.testing.assert_allclose(k_params[name].grad.numpy(), tp.grad.numpy(), rtol=rtol * 10, atol=atol * 10,
                                   err_msg=name)


# ---- MLP -------------------------------------------------------------------------------------
def test_mlp_shape_and_structure():
    model = models.mlp()
    assert isinstance(model, nn.Sequential)
    assert model(kiln.randn(128, 784)).shape == (128, 10)
    reference = tnn.Sequential(tnn.Linear(784, 256), tnn.ReLU(), tnn.Linear(256, 256), tnn.ReLU(),
                               tnn.Linear(256, 10))
    _assert_same_structure(model, reference)
    assert repr(model) == repr(reference)


def test_mlp_options():
    model = models.mlp(in_features=5, hidden=(7,), out_features=3, activation="gelu", dropout=0.2)
    assert [type(m).__name__ for m in model] == ["Linear", "GELU", "Dropout", "Linear"]
    assert model(kiln.randn(4, 5)).shape == (4, 3)
    assert [type(m).__name__ for m in models.mlp(hidden=(), out_features=2)] == ["Linear"]
    assert isinstance(models.mlp(activation=lambda: nn.LeakyReLU(0.2))[1], nn.LeakyReLU)
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        models.mlp(activation="swish")
    with pytest.raises(ValueError, match="dropout must be in"):
        models.mlp(dropout=1.0)


@pytest.mark.parametrize("dtype,rtol,atol", [("float32", 1e-5, 1e-6), ("float64", 1e-10, 1e-12)])
def test_mlp_parity(dtype, rtol, atol):
    model = models.mlp(in_features=20, hidden=(16, 12), out_features=5).to(dtype)
    reference = tnn.Sequential(tnn.Linear(20, 16), tnn.ReLU(), tnn.Linear(16, 12), tnn.ReLU(),
                               tnn.Linear(12, 5)).to(getattr(torch, dtype))
    _copy(model, reference)
    x = np.random.default_rng(1).standard_normal((8, 20))
    _compare(model, reference, kiln.tensor(x, dtype=dtype), torch.tensor(x, dtype=getattr(torch, dtype)),
             rtol, atol)


# ---- LeNet-5 ---------------------------------------------------------------------------------
def _torch_lenet():
    return tnn.Sequential(OrderedDict([
        ("conv1", tnn.Conv2d(1, 6, 5)), ("act1", tnn.ReLU()), ("pool1", tnn.MaxPool2d(2)),
        ("conv2", tnn.Conv2d(6, 16, 5)), ("act2", tnn.ReLU()), ("pool2", tnn.MaxPool2d(2)),
        ("flatten", tnn.Flatten()), ("fc1", tnn.Linear(400, 120)), ("act3", tnn.ReLU()),
        ("fc2", tnn.Linear(120, 84)), ("act4", tnn.ReLU()), ("fc3", tnn.Linear(84, 10)),
    ]))


def test_lenet_shape_and_structure():
    model = models.lenet_5()
    assert model(kiln.randn(8, 1, 32, 32)).shape == (8, 10)
    _assert_same_structure(model, _torch_lenet())
    assert sum(p.numel() for p in model.parameters()) == 61706
    assert models.lenet_5(num_classes=3)(kiln.randn(2, 1, 32, 32)).shape == (2, 3)


@pytest.mark.parametrize("dtype,rtol,atol", [("float32", 1e-4, 1e-5), ("float64", 1e-10, 1e-12)])
def test_lenet_parity(dtype, rtol, atol):
    model, reference = models.lenet_5().to(dtype), _torch_lenet().to(getattr(torch, dtype))
    _copy(model, reference)
    x = np.random.default_rng(2).standard_normal((4, 1, 32, 32))
    _compare(model, reference, kiln.tensor(x, dtype=dtype), torch.tensor(x, dtype=getattr(torch, dtype)),
             rtol, atol)


# ---- GPT -------------------------------------------------------------------------------------
class TorchCausalSelfAttention(tnn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.c_attn = tnn.Linear(d_model, 3 * d_model)
        self.c_proj = tnn.Linear(d_model, d_model)
        self.resid_dropout = tnn.Dropout(0.0)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=-1)
        q, k, v = (h.reshape(b, t, self.n_head, c // self.n_head).transpose(1, 2) for h in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, c)))


class TorchMLP(tnn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.c_fc = tnn.Linear(d_model, 4 * d_model)
        self.gelu = tnn.GELU(approximate="tanh")
        self.c_proj = tnn.Linear(4 * d_model, d_model)
        self.dropout = tnn.Dropout(0.0)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class TorchBlock(tnn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.ln_1 = tnn.LayerNorm(d_model)
        self.attn = TorchCausalSelfAttention(d_model, n_head)
        self.ln_2 = tnn.LayerNorm(d_model)
        self.mlp = TorchMLP(d_model)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TorchGPT(tnn.Module):
    def __init__(self, vocab: int, n_layer: int, n_head: int, d_model: int, block_size: int):
        super().__init__()
        self.wte = tnn.Embedding(vocab, d_model)
        self.wpe = tnn.Embedding(block_size, d_model)
        self.drop = tnn.Dropout(0.0)
        self.blocks = tnn.ModuleList([TorchBlock(d_model, n_head) for _ in range(n_layer)])
        self.ln_f = tnn.LayerNorm(d_model)
        self.head = tnn.Linear(d_model, vocab, bias=False)

    def forward(self, idx):
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1])))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


CONFIG = dict(vocab=17, n_layer=2, n_head=4, d_model=16, block_size=12)


def _nontrivial_norms(tmod) -> None:
    """Give the LayerNorms non-default scale and shift so their grads are really exercised."""
    with torch.no_grad():
        for name, p in tmod.named_parameters():
            if ".ln_" in name or name.startswith("ln_f"):
                p.copy_(torch.randn(p.shape) * 0.1 + (1.0 if name.endswith("weight") else 0.0))


def test_gpt_shape_and_structure():
    model = models.gpt(**CONFIG)
    idx = kiln.randint(0, CONFIG["vocab"], (3, 10))
    assert model(idx).shape == (3, 10, CONFIG["vocab"])
    _assert_same_structure(model, TorchGPT(**CONFIG))
    assert isinstance(model, models.GPT)


def test_gpt_init():
    model = models.gpt(vocab=50, n_layer=4, n_head=4, d_model=64, block_size=16)
    assert np.std(model.wte.weight.detach().numpy()) == pytest.approx(0.02, rel=0.1)
    assert np.std(model.blocks[0].attn.c_proj.weight.detach().numpy()) == pytest.approx(0.02 / math.sqrt(8), rel=0.1)
    assert not np.any(model.blocks[0].mlp.c_fc.bias.detach().numpy())
    assert np.all(model.ln_f.weight.detach().numpy() == 1)


def test_gpt_parity_float64():
    """Same weights -> same logits (1e-10 relative) and same parameter grads, float64."""
    model, reference = models.gpt(**CONFIG).double(), TorchGPT(**CONFIG).double()
    _nontrivial_norms(reference)
    _copy(model, reference)
    idx = np.random.default_rng(3).integers(0, CONFIG["vocab"], (3, CONFIG["block_size"]))
    _compare(model, reference, kiln.tensor(idx), torch.tensor(idx), rtol=1e-10, atol=1e-12)


def test_gpt_parity_float32_with_loss():
    model, reference = models.gpt(**CONFIG), TorchGPT(**CONFIG)
    _copy(model, reference)
    rng = np.random.default_rng(4)
    idx = rng.integers(0, CONFIG["vocab"], (2, 9))
    targets = rng.integers(0, CONFIG["vocab"], (2, 9))
    k_loss = kiln.nn.functional.cross_entropy(model(kiln.tensor(idx)).reshape(-1, CONFIG["vocab"]),
                                              kiln.tensor(targets).reshape(-1))
    t_loss = tnn.functional.cross_entropy(reference(torch.tensor(idx)).reshape(-1, CONFIG["vocab"]),
                                          torch.tensor(targets).reshape(-1))
    assert k_loss.item() == pytest.approx(t_loss.item(), rel=1e-5)
    k_loss.backward()
    t_loss.backward()
    k_params = dict(model.named_parameters())
    for name, tp in reference.named_parameters():
        np.testing.assert_allclose(k_params[name].grad.numpy(), tp.grad.numpy(), rtol=1e-3, atol=1e-6,
                                   err_msg=name)


def test_gpt_is_causal():
    model = models.gpt(**CONFIG)
    idx = np.random.default_rng(5).integers(0, CONFIG["vocab"], (1, 8))
    changed = idx.copy()
    changed[0, 5:] = (changed[0, 5:] + 1) % CONFIG["vocab"]
    a = model(kiln.tensor(idx)).detach().numpy()
    b = model(kiln.tensor(changed)).detach().numpy()
    np.testing.assert_array_equal(a[:, :5], b[:, :5])
    assert np.any(a[:, 5:] != b[:, 5:])


def test_gpt_dropout_train_vs_eval():
    model = models.gpt(**CONFIG, dropout=0.5)
    idx = kiln.randint(0, CONFIG["vocab"], (2, 6))
    assert np.any(model(idx).detach().numpy() != model(idx).detach().numpy())
    model.eval()
    np.testing.assert_array_equal(model(idx).detach().numpy(), model(idx).detach().numpy())


def test_gpt_input_errors():
    model = models.gpt(**CONFIG)
    with pytest.raises(ValueError, match="sequence length 13 exceeds block_size 12"):
        model(kiln.zeros(1, 13, dtype=kiln.int64))
    with pytest.raises(TypeError, match=r"int64 token ids of shape \(B, T\)"):
        model(kiln.zeros(1, 4))
    with pytest.raises(ValueError, match="divisible by n_head"):
        models.gpt(vocab=10, n_layer=1, n_head=3, d_model=16, block_size=4)


def test_gpt_learns_with_plain_sgd():
    """A few manual SGD steps on one batch lower the loss: grads flow to every parameter."""
    model = models.gpt(**CONFIG)
    rng = np.random.default_rng(6)
    idx = kiln.tensor(rng.integers(0, CONFIG["vocab"], (4, 8)))
    targets = kiln.tensor(rng.integers(0, CONFIG["vocab"], (4, 8)))
    losses = []
    for _ in range(5):
        loss = kiln.nn.functional.cross_entropy(model(idx).reshape(-1, CONFIG["vocab"]), targets.reshape(-1))
        losses.append(loss.item())
        model.zero_grad()
        loss.backward()
        with kiln.no_grad():
            for p in model.parameters():
                assert p.grad is not None
                p.sub_(p.grad * 0.5)
    assert losses[-1] < losses[0] - 0.1
