"""A compiled whole step on the native runtime writes parameters and optimizer state in place.

The optimizer's update groups write their results straight into the arrays they replace
(kiln/jit/backends/cpu/schedule.py, `_write_in_place`); the executor then copies nothing.
Checked against eager training on the same data: the state after each step, the arrays
the tensors hold (the same objects, so NumPy views a caller keeps see the update, as in
eager), and a call that the plan's last segment refuses (an optimizer state array in
another layout) after earlier segments ran: it must not have written anything, so its
replay in Python starts from the state the call began with.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import nn
from native_helpers import native_cache, needs_native  # noqa: F401 - native_cache: an autouse fixture
from whole_step_helpers import loss_of

pytestmark = needs_native


def _trainer(optimizer: str, compiled: bool):
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    if optimizer == "sgd":
        opt = kiln.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-2)
    else:
        opt = kiln.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)

    def train_step(x, y):
        opt.zero_grad()
        loss = loss_of(model, x, y)
        loss.backward()
        opt.step()
        return loss

    return model, opt, (kiln.compile(train_step, backend="cpu") if compiled else train_step)


def _batches(n: int) -> list:
    rng = np.random.default_rng(3)
    return [(kiln.tensor(rng.standard_normal((5, 8)).astype(np.float32)), kiln.tensor(rng.integers(0, 4, 5)))
            for _ in range(n)]


def _state_arrays(model, opt) -> list[np.ndarray]:
    arrays = [p._data for p in model.parameters()]
    for p in model.parameters():
        arrays += [v._data for v in opt.state.get(p, {}).values() if isinstance(v, kiln.Tensor)]
    return arrays


def _assert_same(model_a, opt_a, model_b, opt_b) -> None:
    for a, b in zip(_state_arrays(model_a, opt_a), _state_arrays(model_b, opt_b)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def _step_plan(step):
    (entry,) = [e for e in step.cache_entries if getattr(e, "binding", None) is not None][-1:]
    return entry.plan


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_update_writes_parameters_and_state_in_place(optimizer: str) -> None:
    model, opt, step = _trainer(optimizer, compiled=True)
    eager_model, eager_opt, eager_step = _trainer(optimizer, compiled=False)
    batches = _batches(5)
    for x, y in batches[:2]:  # the first step creates the optimizer state; the second plan is the steady one
        np.testing.assert_allclose(float(step(x, y)), float(eager_step(x, y)), rtol=1e-5)
    arrays = _state_arrays(model, opt)
    views = [a.reshape(-1)[:3] for a in arrays]  # a caller's NumPy views of the state
    for x, y in batches[2:]:
        np.testing.assert_allclose(float(step(x, y)), float(eager_step(x, y)), rtol=1e-5)
        _assert_same(model, opt, eager_model, eager_opt)
    assert all(a is b for a, b in zip(_state_arrays(model, opt), arrays)), "state arrays were replaced"
    for view, a in zip(views, arrays):
        np.testing.assert_array_equal(view, a.reshape(-1)[:3])
    plan = _step_plan(step)
    analysis = plan.analysis
    assert len(analysis.written) == len(analysis.graph.state_writes) > 0  # (AdamW's 0-d step counters too)
    assert plan.fallback_calls == 0 and plan.observed_calls == 0


def test_a_refused_call_writes_nothing_before_its_replay() -> None:
    """The last segment (the one writing in place) refuses a momentum buffer in F order after the
    forward and backward segments ran: the call is replayed from unchanged state and copies its writes."""
    model, opt, step = _trainer("sgd", compiled=True)
    eager_model, eager_opt, eager_step = _trainer("sgd", compiled=False)
    batches = _batches(4)
    for x, y in batches[:2]:
        step(x, y)
        eager_step(x, y)
    plan = _step_plan(step)
    assert plan.analysis.written
    weight = model[0].weight
    buf = opt.state[weight]["momentum_buffer"]
    buf._data = np.asfortranarray(buf._data)
    observed = plan.observed_calls
    x, y = batches[2]
    np.testing.assert_allclose(float(step(x, y)), float(eager_step(x, y)), rtol=1e-5)
    assert plan.observed_calls == observed + 1
    _assert_same(model, opt, eager_model, eager_opt)
    x, y = batches[3]  # and the calls after it (a variant for that layout, or the same refusal)
    np.testing.assert_allclose(float(step(x, y)), float(eager_step(x, y)), rtol=1e-5)
    _assert_same(model, opt, eager_model, eager_opt)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_large_updates_run_block_by_block_with_eagers_bits(optimizer: str) -> None:
    """Layers of 16384+ weights: each parameter's update groups (momentum or moments, then the parameter)
    run in blocks of the flat space, one group after the other per block: bit for bit eager's update."""
    def build():
        kiln.manual_seed(1)
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 48))
        opt = kiln.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True) if optimizer == "sgd" \
            else kiln.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05, amsgrad=True)

        def train_step(x, y):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        return model, opt, train_step

    model, opt, step = build()
    step = kiln.compile(step, backend="cpu")
    eager_model, eager_opt, eager_step = build()
    rng = np.random.default_rng(4)
    for _ in range(4):
        x = kiln.tensor(rng.standard_normal((3, 64)).astype(np.float32))
        y = kiln.tensor(rng.standard_normal((3, 48)).astype(np.float32))
        assert float(step(x, y)) == float(eager_step(x, y))
        for a, b in zip(_state_arrays(model, opt), _state_arrays(eager_model, eager_opt)):
            np.testing.assert_array_equal(a, b)
    assert "run block by block" in _step_plan(step).source
