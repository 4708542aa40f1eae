"""Acceptance 1-2: compiled MLP, LeNet-5 and GPT equal eager, in one step and over training."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.models import gpt, lenet_5, mlp

from jit_helpers import TOL, assert_close, grads_of


def _model(name: str, dtype: str):
    kiln.manual_seed(0)
    if name == "mlp":
        model, x = mlp(32, (24, 16), 10), kiln.randn(6, 32)
        y = kiln.randint(0, 10, (6,))
    elif name == "lenet":
        model, x = lenet_5(), kiln.randn(3, 1, 32, 32)
        y = kiln.randint(0, 10, (3,))
    else:
        model = gpt(vocab=40, n_layer=2, n_head=2, d_model=16, block_size=8, dropout=0.1)
        x = kiln.randint(0, 40, (2, 8))
        y = kiln.randint(0, 40, (2, 8))
    model = model.to(dtype)
    if x.dtype.is_floating_point:
        x = x.to(dtype)
    return model, x, y


def _loss(name, out, y):
    if name == "gpt":
        return kiln.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return kiln.nn.functional.cross_entropy(out, y)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["mlp", "lenet", "gpt"])
def test_outputs_and_grads_match_eager(name, dtype):
    model, x, y = _model(name, dtype)
    if x.dtype.is_floating_point:
        x.requires_grad_(True)
    compiled = kiln.compile(model)
    for _ in range(2):  # the trace call, then a replayed call
        state = kiln.get_rng_state()
        model.zero_grad()
        if x.requires_grad:
            x.grad = None
        eager_out = model(x)
        _loss(name, eager_out, y).backward()
        eager_grads = grads_of(model.parameters())
        eager_xgrad = None if x.grad is None else x.grad.numpy().copy()

        kiln.set_rng_state(state)
        model.zero_grad()
        if x.requires_grad:
            x.grad = None
        out = compiled(x)
        _loss(name, out, y).backward()
        assert_close(out, eager_out, dtype)
        for got, want in zip(grads_of(model.parameters()), eager_grads):
            np.testing.assert_allclose(got, want, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
        if eager_xgrad is not None:
            np.testing.assert_allclose(x.grad.numpy(), eager_xgrad, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
    assert compiled.stats.traces == 1
    assert compiled.stats.hits == 1


@pytest.mark.parametrize("name", ["mlp", "lenet", "gpt"])
def test_100_training_steps_match_eager(name):
    steps = 100 if name != "lenet" else 40
    results = {}
    for mode in ("eager", "compiled"):
        model, x, y = _model(name, "float64")
        kiln.manual_seed(123)
        opt = kiln.optim.AdamW(model.parameters(), lr=1e-2) if name == "gpt" else \
            kiln.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        run = kiln.compile(model) if mode == "compiled" else model
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = _loss(name, run(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        results[mode] = (losses, [p.detach().numpy().copy() for p in model.parameters()])
        if mode == "compiled":
            assert run.stats.traces == 1, run.explain()
            assert run.stats.hits == steps - 1
    np.testing.assert_allclose(results["compiled"][0], results["eager"][0], rtol=1e-9)
    for a, b in zip(results["compiled"][1], results["eager"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
    assert results["eager"][0][-1] < results["eager"][0][0]


def test_train_and_eval_get_separate_plans():
    model, x, _ = _model("gpt", "float32")
    compiled = kiln.compile(model)
    compiled(x)
    compiled.eval()
    with kiln.no_grad():
        out_eval = compiled(x)
        assert_close(out_eval, model(x))
    compiled.train()
    compiled(x)
    assert compiled.stats.traces == 2
    assert compiled.stats.hits == 1
