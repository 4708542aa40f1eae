"""Whole compiled steps follow eager where Python reaches into them from outside the function:
gradient hooks, several optimizer steps per call, functions looked up by computed keys,
threads sharing a stateful module, parameters given another shape, options switched mid-run.

The oracle is the same step run eagerly from the same seed: parameters and outputs must be
bit-equal, or the compiled call must raise what eager raises.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np
import pytest

import kiln
from kiln import nn

OPTIMIZERS: dict[str, Callable[[Any], kiln.optim.Optimizer]] = {
    "adam": lambda ps: kiln.optim.Adam(ps, lr=1e-2),
    "adamw_amsgrad": lambda ps: kiln.optim.AdamW(ps, lr=1e-2, amsgrad=True),
    "sgd_momentum": lambda ps: kiln.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    "rmsprop_centered": lambda ps: kiln.optim.RMSprop(ps, lr=1e-2, momentum=0.5, centered=True),
    "adagrad": lambda ps: kiln.optim.Adagrad(ps, lr=0.1),
    "adadelta": lambda ps: kiln.optim.Adadelta(ps, lr=1.0),
}


def _model() -> nn.Module:
    kiln.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _batch(i: int) -> kiln.Tensor:
    return kiln.tensor(np.random.default_rng(i).standard_normal((5, 4)), dtype="float32")


def _weights(model: nn.Module) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in model.parameters()]


def _assert_same(a: list, b: list) -> None:
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


# ---- hooks ------------------------------------------------------------------------------------

def _hooked_run(compiled: bool, schedule: list[float], post: bool = False) -> list:
    model = _model()
    opt = kiln.optim.SGD(model.parameters(), lr=0.1)
    scale = {"v": 1.0}
    seen = []
    if post:
        model[0].weight.register_post_accumulate_grad_hook(lambda p: p.grad.mul_(scale["v"]))
    else:
        model[0].weight.register_hook(lambda g: g * scale["v"])

    def step(x):
        opt.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        opt.step()
        return loss

    f = kiln.compile(step) if compiled else step
    for i, v in enumerate(schedule):
        scale["v"] = v
        f(_batch(i))
        seen.append(_weights(model))
    return seen


@pytest.mark.parametrize("post", [False, True], ids=["tensor_hook", "post_accumulate_hook"])
def test_a_hook_reading_a_changing_value_is_followed_on_every_call(post):
    schedule = [1.0, 1.0, 1.0, 0.0, 0.5, 0.5, 2.0]
    eager, compiled = _hooked_run(False, schedule, post), _hooked_run(True, schedule, post)
    for a, b in zip(eager, compiled):
        _assert_same(a, b)


def test_a_hook_that_raises_on_a_later_call_raises_in_the_compiled_step_too():
    model = _model()
    opt = kiln.optim.SGD(model.parameters(), lr=0.1)
    flags = {"fail": False}

    def check(g):
        if flags["fail"]:
            raise FloatingPointError("gradient check failed")
        return g

    model[2].weight.register_hook(check)

    @kiln.compile
    def step(x):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    for i in range(3):
        step(_batch(i))
    flags["fail"] = True
    with pytest.raises(FloatingPointError, match="gradient check failed"):
        step(_batch(3))


def test_hooks_registered_or_removed_between_calls_are_followed():
    def run(compiled: bool) -> list:
        model = _model()
        opt = kiln.optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()

        f = kiln.compile(step) if compiled else step
        out = []
        f(_batch(0))
        f(_batch(1))
        handle = model[0].bias.register_hook(lambda g: g * 0)
        f(_batch(2))
        out.append(_weights(model))
        handle.remove()
        f(_batch(3))
        out.append(_weights(model))
        return out, f

    eager, _ = run(False)
    compiled, f = run(True)
    for a, b in zip(eager, compiled):
        _assert_same(a, b)
    assert "gradient hook was registered on or removed" in f.explain()


# ---- several optimizer steps in one call -------------------------------------------------------

@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_two_optimizer_steps_in_one_compiled_call_match_eager(name):
    def run(compiled: bool) -> list:
        model = _model()
        opt = OPTIMIZERS[name](model.parameters())

        def step(x):
            for half in (x[:3], x[3:]):
                opt.zero_grad()
                model(half).pow(2).mean().backward()
                opt.step()

        f = kiln.compile(step) if compiled else step
        for i in range(4):
            f(_batch(i))
        return _weights(model) + [v.detach().numpy().copy() for s in opt.state.values() for v in s.values()
                                  if isinstance(v, kiln.Tensor)]

    _assert_same(run(False), run(True))


# ---- a function looked up by a computed key ----------------------------------------------------

SCALE = 2.0


def _scaled(x):
    return x * SCALE


ACTIVATIONS = {"scaled": _scaled, "relu": lambda x: x.relu()}


def test_a_global_read_by_a_function_found_with_a_computed_key_is_guarded():
    global SCALE
    name = "scaled"
    f = kiln.compile(lambda x: ACTIVATIONS[name](x))
    x = kiln.ones(3)
    try:
        assert f(x).tolist() == [2.0] * 3 and f(x).tolist() == [2.0] * 3
        SCALE = 5.0
        assert f(x).tolist() == [5.0] * 3
    finally:
        SCALE = 2.0
    assert "SCALE" in f.explain()


# ---- threads ----------------------------------------------------------------------------------

@pytest.mark.parametrize("compile_model", [True, False], ids=["compiled_module", "compiled_function"])
def test_threads_calling_a_compiled_batchnorm_lose_no_running_stat_update(compile_model):
    bn = nn.BatchNorm1d(4)
    f = kiln.compile(bn) if compile_model else kiln.compile(lambda x: bn(x))
    x = kiln.randn(8, 4)
    f(x)
    reference = nn.BatchNorm1d(4)
    reference(x)

    def work():
        for _ in range(50):
            f(x)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for _ in range(400):
        reference(x)
    assert int(bn.num_batches_tracked.item()) == 401
    np.testing.assert_array_equal(bn.running_mean.numpy(), reference.running_mean.numpy())
    np.testing.assert_array_equal(bn.running_var.numpy(), reference.running_var.numpy())


# ---- parameters that get another shape ---------------------------------------------------------

def _reshaped_run(compiled: bool, momentum: float) -> tuple:
    kiln.manual_seed(0)
    m = nn.Linear(4, 3)
    opt = kiln.optim.SGD(m.parameters(), lr=0.1, momentum=momentum)

    def step(x):
        opt.zero_grad()
        loss = m(x).sum()
        loss.backward()
        opt.step()
        return loss

    f = kiln.compile(step) if compiled else step
    x = kiln.ones(2, 4)
    f(x)
    f(x)
    m.weight.data = kiln.ones(5, 4)
    m.bias.data = kiln.ones(5)
    before = _weights(m)
    try:
        f(x)
        f(x)
    except kiln.ShapeError as exc:
        return exc, before, _weights(m), f
    return None, before, _weights(m), f


def test_a_parameter_given_another_shape_between_whole_step_calls_retraces():
    error, _, eager, _ = _reshaped_run(False, 0.0)
    error_c, _, compiled, f = _reshaped_run(True, 0.0)
    assert error is None and error_c is None
    _assert_same(eager, compiled)
    assert "now holds a float32 array of shape (5, 4)" in f.explain()


@pytest.mark.parametrize("compiled", [False, True])
def test_optimizer_state_of_the_old_shape_is_a_clear_error_before_anything_is_written(compiled):
    error, before, after, _ = _reshaped_run(compiled, 0.9)
    assert error is not None
    assert "'momentum_buffer'" in str(error) and "(3, 4)" in str(error) and "(5, 4)" in str(error)
    assert "Fix: drop its state" in str(error)
    _assert_same(before, after)


# ---- options switched on mid-run ---------------------------------------------------------------

@pytest.mark.parametrize("switch", [("adam", "amsgrad", True), ("rmsprop", "centered", True),
                                    ("rmsprop", "momentum", 0.9)], ids=lambda s: f"{s[0]}_{s[1]}")
def test_an_option_switched_on_mid_run_creates_its_state(switch):
    name, key, value = switch

    def run(compiled: bool) -> list:
        model = _model()
        opt = kiln.optim.Adam(model.parameters(), lr=1e-2) if name == "adam" else \
            kiln.optim.RMSprop(model.parameters(), lr=1e-2)

        def step(x):
            opt.zero_grad()
            model(x).pow(2).sum().backward()
            opt.step()

        f = kiln.compile(step) if compiled else step
        for i in range(6):
            if i == 3:
                opt.param_groups[0][key] = value
            f(_batch(i))
        return _weights(model)

    _assert_same(run(False), run(True))


def test_threads_calling_a_compiled_training_step_lose_no_optimizer_step():
    model = _model()
    opt = kiln.optim.Adam(model.parameters(), lr=1e-3)

    @kiln.compile
    def step(x):
        opt.zero_grad()
        model(x).pow(2).sum().backward()
        opt.step()

    x = _batch(0)
    step(x)
    step(x)

    def work():
        for _ in range(25):
            step(x)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {float(s["step"].item()) for s in opt.state.values()} == {102.0}
    assert step.stats.fallbacks == 0
