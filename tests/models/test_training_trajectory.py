"""Issue 2 acceptance: MLP, LeNet-5 and GPT train identically in kiln and PyTorch.

Both frameworks start from the same weights (copied through state_dict and NumPy),
see the same batches, and take 30 steps with SGD-momentum or AdamW; the per-step
losses must agree within 1e-4 relative.
"""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest

import kiln
from kiln.models import gpt, lenet_5, mlp

torch = pytest.importorskip("torch")
tnn = torch.nn
STEPS = 30


def torch_mlp():
    return tnn.Sequential(tnn.Linear(64, 32), tnn.ReLU(), tnn.Linear(32, 32), tnn.ReLU(), tnn.Linear(32, 10))


def torch_lenet():
    return tnn.Sequential(OrderedDict([
        ("conv1", tnn.Conv2d(1, 6, 5)), ("act1", tnn.ReLU()), ("pool1", tnn.MaxPool2d(2)),
        ("conv2", tnn.Conv2d(6, 16, 5)), ("act2", tnn.ReLU()), ("pool2", tnn.MaxPool2d(2)),
        ("flatten", tnn.Flatten()), ("fc1", tnn.Linear(400, 120)), ("act3", tnn.ReLU()),
        ("fc2", tnn.Linear(120, 84)), ("act4", tnn.ReLU()), ("fc3", tnn.Linear(84, 10)),
    ]))


class TorchAttention(tnn.Module):
    def __init__(self, d: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.c_attn = tnn.Linear(d, 3 * d)
        self.c_proj = tnn.Linear(d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=-1)
        q, k, v = (h.reshape(b, t, self.n_head, c // self.n_head).transpose(1, 2) for h in (q, k, v))
        y = tnn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class TorchMLP(tnn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.c_fc = tnn.Linear(d, 4 * d)
        self.c_proj = tnn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(tnn.functional.gelu(self.c_fc(x), approximate="tanh"))


class TorchBlock(tnn.Module):
    def __init__(self, d: int, n_head: int):
        super().__init__()
        self.ln_1, self.attn = tnn.LayerNorm(d), TorchAttention(d, n_head)
        self.ln_2, self.mlp = tnn.LayerNorm(d), TorchMLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TorchGPT(tnn.Module):
    def __init__(self, vocab: int, n_layer: int, n_head: int, d: int, block_size: int):
        super().__init__()
        self.wte, self.wpe = tnn.Embedding(vocab, d), tnn.Embedding(block_size, d)
        self.blocks = tnn.ModuleList([TorchBlock(d, n_head) for _ in range(n_layer)])
        self.ln_f = tnn.LayerNorm(d)
        self.head = tnn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _setup(name: str):
    kiln.manual_seed(0)
    rng = np.random.default_rng(0)
    if name == "mlp":
        km, tm = mlp(64, (32, 32), 10), torch_mlp()
        batches = [(rng.standard_normal((16, 64)).astype(np.float32), rng.integers(0, 10, 16)) for _ in range(STEPS)]
    elif name == "lenet":
        km, tm = lenet_5(), torch_lenet()
        batches = [(rng.standard_normal((8, 1, 32, 32)).astype(np.float32), rng.integers(0, 10, 8))
                   for _ in range(STEPS)]
    else:
        km, tm = gpt(vocab=30, n_layer=2, n_head=2, d_model=16, block_size=8), TorchGPT(30, 2, 2, 16, 8)
        batches = [(rng.integers(0, 30, (4, 8)), rng.integers(0, 30, (4, 8))) for _ in range(STEPS)]
    state = {k: torch.from_numpy(v.detach().numpy().copy()) for k, v in km.state_dict().items()}
    assert set(state) == set(tm.state_dict()), "kiln and torch state_dict keys differ"
    tm.load_state_dict(state)
    return km, tm, batches


def _loss_kiln(name, model, x, y):
    out = model(kiln.tensor(x))
    y = kiln.tensor(y)
    if name == "gpt":
        return kiln.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return kiln.nn.functional.cross_entropy(out, y)


def _loss_torch(name, model, x, y):
    out = model(torch.from_numpy(np.asarray(x)))
    y = torch.from_numpy(np.asarray(y))
    if name == "gpt":
        return tnn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return tnn.functional.cross_entropy(out, y)


@pytest.mark.parametrize("optimizer", ["sgd_momentum", "adamw"])
@pytest.mark.parametrize("name", ["mlp", "lenet", "gpt"])
def test_losses_agree_with_pytorch_for_30_steps(name, optimizer):
    km, tm, batches = _setup(name)
    if optimizer == "sgd_momentum":
        kopt = kiln.optim.SGD(km.parameters(), lr=0.05, momentum=0.9)
        topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
    else:
        kopt = kiln.optim.AdamW(km.parameters(), lr=3e-3, weight_decay=0.01)
        topt = torch.optim.AdamW(tm.parameters(), lr=3e-3, weight_decay=0.01)
    k_losses, t_losses = [], []
    for x, y in batches:
        kopt.zero_grad()
        loss = _loss_kiln(name, km, x, y)
        loss.backward()
        kopt.step()
        k_losses.append(loss.item())
        topt.zero_grad()
        tloss = _loss_torch(name, tm, x, y)
        tloss.backward()
        topt.step()
        t_losses.append(tloss.item())
    assert all(math.isfinite(v) for v in k_losses)
    np.testing.assert_allclose(k_losses, t_losses, rtol=1e-4)
