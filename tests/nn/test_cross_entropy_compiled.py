"""Eager cross-entropy of large logits runs through cached compiled plans (kiln/jit/eager_plans.py): against
PyTorch, against kiln's NumPy path, higher-order gradients, in-place checks, one plan for every batch size,
and the cases it leaves to NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.functional import loss_compiled
from kiln.jit import eager_plans
from kiln.jit.backends import cpu

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

F = kiln.nn.functional
C = 1 << 14  # 64 rows of 16384 classes: exactly MIN_ELEMENTS


@pytest.fixture
def fresh_plans(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(eager_plans, "_compiled", {})
    return eager_plans._compiled


def _case(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    targets = rng.integers(0, C, rows)
    targets[::5] = -100
    return rng.standard_normal((rows, C)).astype(np.float32) * 3, targets


@pytest.mark.parametrize("reduction, smoothing", [("mean", 0.0), ("sum", 0.0), ("none", 0.0), ("mean", 0.1)])
def test_values_and_gradients_match_pytorch(fresh_plans, reduction, smoothing):
    logits, targets = _case(64)
    x = kiln.tensor(logits, requires_grad=True)
    out = F.cross_entropy(x, kiln.tensor(targets), reduction=reduction, label_smoothing=smoothing)
    (out * 0.5).sum().backward()
    tx = torch.tensor(logits, requires_grad=True)
    want = torch.nn.functional.cross_entropy(tx, torch.tensor(targets), reduction=reduction, label_smoothing=smoothing)
    (want * 0.5).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=2e-5, atol=1e-5)
    # (float32 sums over 16384 classes, in another order than PyTorch's)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert list(fresh_plans) == [(C, -100, reduction, smoothing)]  # the compiled path ran
    assert out.grad_fn is not None


def test_the_numpy_path_gives_the_same_loss_within_the_compilers_ulp_bound(fresh_plans, monkeypatch):
    logits, targets = _case(80, seed=1)

    def loss_and_grad():
        x = kiln.tensor(logits, requires_grad=True)
        out = F.cross_entropy(x, kiln.tensor(targets))
        out.backward()
        return out.detach().numpy(), x.grad.numpy()

    compiled = loss_and_grad()
    monkeypatch.setattr(loss_compiled, "_hook", None)
    numpy_path = loss_and_grad()
    for a, b in zip(compiled, numpy_path):
        np.testing.assert_array_max_ulp(a, b, maxulp=4)


def test_one_plan_serves_every_batch_size(fresh_plans):
    for rows in (64, 96, 64, 128):
        logits, targets = _case(rows, seed=rows)
        x = kiln.tensor(logits, requires_grad=True)
        F.cross_entropy(x, kiln.tensor(targets)).backward()
        tx = torch.tensor(logits, requires_grad=True)
        torch.nn.functional.cross_entropy(tx, torch.tensor(targets)).backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)
    ((loss_plan, gradient_plan),) = fresh_plans.values()
    assert loss_plan.stats.traces == 1 and gradient_plan.stats.traces == 1


def test_higher_order_gradients_differentiate_the_decomposition(fresh_plans):
    logits, targets = _case(64, seed=2)
    x = kiln.tensor(logits, requires_grad=True)
    (g,) = kiln.autograd.grad(F.cross_entropy(x, kiln.tensor(targets)), [x], create_graph=True)
    (g * g).sum().backward()
    tx = torch.tensor(logits, requires_grad=True)
    (tg,) = torch.autograd.grad(torch.nn.functional.cross_entropy(tx, torch.tensor(targets)), [tx], create_graph=True)
    (tg * tg).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-3, atol=1e-9)


def test_logits_changed_in_place_before_backward_raise(fresh_plans):
    logits, targets = _case(64, seed=3)
    h = kiln.tensor(logits, requires_grad=True) * 1.0
    loss = F.cross_entropy(h, kiln.tensor(targets))
    h.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_small_logits_and_other_cases_stay_on_the_numpy_path(fresh_plans):
    rng = np.random.default_rng(4)
    small = kiln.tensor(rng.standard_normal((64, 100)).astype(np.float32), requires_grad=True)
    F.cross_entropy(small, kiln.tensor(rng.integers(0, 100, 64))).backward()
    big, targets = _case(64)
    F.cross_entropy(kiln.tensor(big.astype(np.float64)), kiln.tensor(targets))  # float64
    F.cross_entropy(kiln.tensor(big), kiln.tensor(targets), weight=kiln.ones(C))  # class weights
    assert fresh_plans == {}


def test_bad_targets_raise_as_eagerly(fresh_plans):
    logits, _ = _case(64)
    with pytest.raises(IndexError, match=f"class indices must lie in \\[0, {C - 1}\\]"):
        F.cross_entropy(kiln.tensor(logits), kiln.tensor(np.full(64, C + 2)))


def test_without_a_compiler_the_numpy_path_runs(fresh_plans, monkeypatch):
    monkeypatch.setattr(cpu, "available", lambda: False)
    logits, targets = _case(64, seed=5)
    x = kiln.tensor(logits, requires_grad=True)
    F.cross_entropy(x, kiln.tensor(targets)).backward()
    tx = torch.tensor(logits, requires_grad=True)
    torch.nn.functional.cross_entropy(tx, torch.tensor(targets)).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)
    assert list(fresh_plans.values()) == [None]
