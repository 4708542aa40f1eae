"""Representative workloads whose native plans' C the vectorization check builds for every target.

Each returns the C source of every plan its compiled function ran (forward, backward, whole
steps), after three calls so the native variant exists. Sizes are large enough that no hot
loop is short enough to be unrolled away.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

import kiln
import kiln.functional as F
from kiln import nn
from native_helpers import plans_of

ROWS, COLS = 64, 1024


def _tensor(rng: np.random.Generator, *shape: int) -> kiln.Tensor:
    return kiln.tensor(rng.standard_normal(shape).astype(np.float32))


def _sources(compiled, *args) -> list[str]:
    for _ in range(3):
        compiled(*args)
    # each library's C on its own (a large plan is split into several, each a whole C file)
    return [source for plan in plans_of(compiled) if hasattr(plan, "source")
            for source in getattr(getattr(plan, "current", None), "sources", [plan.source])]


def layer_norm_gelu() -> list[str]:
    rng = np.random.default_rng(0)
    w, b = _tensor(rng, COLS), _tensor(rng, COLS)
    f = kiln.compile(lambda x: F.gelu(F.layer_norm(x, (COLS,), w, b), approximate="tanh"))
    return _sources(f, _tensor(rng, ROWS, COLS))


def exact_gelu() -> list[str]:
    return _sources(kiln.compile(lambda x: F.gelu(x)), _tensor(np.random.default_rng(0), ROWS, COLS))


def softmax() -> list[str]:
    return _sources(kiln.compile(lambda x: F.softmax(x, dim=-1)), _tensor(np.random.default_rng(0), ROWS, COLS))


def cross_entropy_fwd_bwd() -> list[str]:
    rng = np.random.default_rng(0)
    x, y = _tensor(rng, ROWS, COLS), kiln.tensor(rng.integers(0, COLS, ROWS))
    x.requires_grad_(True)

    def step(x, y):
        loss = F.cross_entropy(x, y)
        loss.backward()
        return loss

    return _sources(kiln.compile(step), x, y)


def _train_step(model: nn.Module, opt: kiln.optim.Optimizer, x: kiln.Tensor, y: kiln.Tensor,
                logits: Callable = lambda out: out) -> list[str]:
    def step(x, y):
        opt.zero_grad()
        out = logits(model(x))
        loss = F.cross_entropy(out, y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    return _sources(kiln.compile(step), x, y)


def adamw_step() -> list[str]:
    kiln.manual_seed(0)
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256))
    opt = kiln.optim.AdamW(model.parameters(), lr=1e-3)
    return _train_step(model, opt, _tensor(rng, 32, 256), kiln.tensor(rng.integers(0, 256, 32)))


def conv_net_step() -> list[str]:
    kiln.manual_seed(0)
    rng = np.random.default_rng(0)
    model = kiln.models.lenet_5()
    opt = kiln.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return _train_step(model, opt, _tensor(rng, 16, 1, 32, 32), kiln.tensor(rng.integers(0, 10, 16)))


def gpt_block_step() -> list[str]:
    kiln.manual_seed(0)
    rng = np.random.default_rng(0)
    vocab = 65
    model = kiln.models.gpt(vocab=vocab, n_layer=1, n_head=4, d_model=128, block_size=64)
    opt = kiln.optim.AdamW(model.parameters(), lr=1e-3)
    idx = kiln.tensor(rng.integers(0, vocab, (4, 64)))
    return _train_step(model, opt, idx, kiln.tensor(rng.integers(0, vocab, (4, 64))),
                       logits=lambda out: out.reshape(-1, vocab))


WORKLOADS: dict[str, Callable[[], list[str]]] = {
    "LayerNorm+GELU": layer_norm_gelu,
    "exact GELU": exact_gelu,
    "softmax": softmax,
    "cross-entropy fwd+bwd": cross_entropy_fwd_bwd,
    "AdamW step": adamw_step,
    "conv net step": conv_net_step,
    "GPT block step": gpt_block_step,
}
