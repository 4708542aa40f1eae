"""A compiled whole training step in unusual hands: values read inside it, optimizers that do
odd things, several optimizers. Each case either works (and equals eager) or falls back to
eager with a warning that says why and how to fix it (GraphBreakError with fullgraph=True);
none is silently stale."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln import nn
from kiln.jit import GraphBreakError

BACKENDS = ["interpret", "cpu"]


def _data(n: int = 6) -> list[tuple[kiln.Tensor, kiln.Tensor]]:
    rng = np.random.default_rng(0)
    return [(kiln.tensor(rng.standard_normal((5, 4))), kiln.tensor(rng.integers(0, 3, 5))) for _ in range(n)]


def _model(seed: int = 0) -> nn.Module:
    kiln.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).to("float64")


def _both(build, step_of, backend: str, between=None, n: int = 6) -> tuple[list, list, object]:
    """Run `step_of(env)` eagerly and compiled on the same data; return both runs and the compiled fn."""
    runs = []
    for mode in (None, backend):
        env = build()
        step = step_of(env)
        f = kiln.compile(step, backend=mode) if mode else step
        out = []
        for i, (x, y) in enumerate(_data(n)):
            if between is not None:
                between(env, i)
            out.append(float(f(x, y)))
        runs.append((out, [p.detach().numpy().copy() for p in env["model"].parameters()], f))
    (want, want_params, _), (got, got_params, compiled) = runs
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    for a, b in zip(got_params, want_params):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    return got, want, compiled


def _plain_step(env: dict):
    model, opt = env["model"], env["opt"]

    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return train_step


# ---- graph breaks -------------------------------------------------------------------------
def _item_step(env: dict):
    model, opt = env["model"], env["opt"]

    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    return train_step


@pytest.mark.parametrize("backend", BACKENDS)
def test_item_on_the_loss_inside_the_step_falls_back_to_eager(backend: str) -> None:
    build = lambda: {"model": (m := _model()), "opt": kiln.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)}
    with pytest.warns(RuntimeWarning, match=r"falling back to eager.*`item` on a traced tensor at .*"
                                            r"test_whole_step_breaks.py:\d+.*loss.item\(\)"):
        _, _, compiled = _both(build, _item_step, backend)
    assert compiled.stats.fallbacks == 5 and compiled.stats.hits == 0  # every call ran the real step


def test_item_on_the_loss_with_fullgraph_raises() -> None:
    env = {"model": (m := _model()), "opt": kiln.optim.SGD(m.parameters(), lr=0.1)}
    compiled = kiln.compile(_item_step(env), fullgraph=True)
    with pytest.raises(GraphBreakError, match=r"`item` on a traced tensor at .*test_whole_step_breaks.py"):
        compiled(*_data(1)[0])


class NumpySGD(kiln.optim.Optimizer):
    """An optimizer whose update works on arrays (as kiln's own eager updates do)."""

    def __init__(self, params, lr: float):
        super().__init__(params, dict(lr=lr))

    def _update_group(self, group):
        for p in group["params"]:
            if p.grad is not None:
                p._data -= group["lr"] * p.grad._data
                p._bump_version()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_optimizer_that_updates_arrays_falls_back_with_a_fix(backend: str) -> None:
    build = lambda: {"model": (m := _model()), "opt": NumpySGD(m.parameters(), lr=0.1)}
    with pytest.warns(RuntimeWarning, match=r"NumpySGD.step\(\) changed parameters .* outside kiln ops.*"
                                            r"Fix: .*_traced_update_group"):
        _, _, compiled = _both(build, _plain_step, backend)
    assert compiled.stats.fallbacks == 5
    env = build()
    with pytest.raises(GraphBreakError, match="NumpySGD"):
        kiln.compile(_plain_step(env), fullgraph=True)(*_data(1)[0])


def _scheduler_inside(env: dict):
    model, opt, schedule = env["model"], env["opt"], env["schedule"]

    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        schedule.step()
        return loss

    return train_step


def test_a_scheduler_stepped_inside_the_step_falls_back_with_a_fix() -> None:
    def build():
        m = _model()
        opt = kiln.optim.SGD(m.parameters(), lr=0.1)
        return {"model": m, "opt": opt, "schedule": kiln.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)}

    with pytest.warns(RuntimeWarning, match=r"param_groups\[\.\.\.\]\['lr'\] = \.\.\..*Fix: change hyperparameters "
                                            r"outside the compiled function"):
        _both(build, _scheduler_inside, "interpret")


class CountingSGD(kiln.optim.Optimizer):
    """Keeps a Python counter in its state: replays could not advance it."""

    def __init__(self, params, lr: float):
        super().__init__(params, dict(lr=lr))

    def _update_group(self, group):
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            state["count"] = state.get("count", 0) + 1
            p.sub_(p.grad * group["lr"])


class WrappedStateSGD(kiln.optim.Optimizer):
    """Creates its state by wrapping a NumPy array: a plan could not recreate it."""

    def __init__(self, params, lr: float):
        super().__init__(params, dict(lr=lr))

    def _update_group(self, group):
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if "buf" not in state:
                state["buf"] = kiln.Tensor._wrap(np.zeros(p.shape))
            state["buf"].add_(p.grad)
            p.sub_(state["buf"] * group["lr"])


@pytest.mark.parametrize("optimizer, message", [(CountingSGD, r"state 'count' holds a Python value .* Fix: keep "),
                                                (WrappedStateSGD, r"state 'buf' was created outside kiln ops")])
def test_optimizer_state_a_plan_cannot_replay_falls_back(optimizer, message: str) -> None:
    build = lambda: {"model": (m := _model()), "opt": optimizer(m.parameters(), lr=0.1)}
    with pytest.warns(RuntimeWarning, match=message):
        _, _, compiled = _both(build, _plain_step, "interpret")
    assert compiled.stats.fallbacks >= 4


# ---- cases that work ----------------------------------------------------------------------
class SignSGD(kiln.optim.Optimizer):
    """A new optimizer written in kiln ops, PyTorch-style (its own step()): no compiler changes."""

    def __init__(self, params, lr: float = 0.01, momentum: float = 0.0):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    @kiln.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "buf" not in state:
                    state["buf"] = kiln.zeros_like(p)
                state["buf"].mul_(group["momentum"]).add_(p.grad.sign())
                p.sub_(state["buf"] * group["lr"])


class HalvingSGD(kiln.optim.Optimizer):
    """A new optimizer that only implements _update_group, in kiln ops."""

    def __init__(self, params, lr: float = 0.01):
        super().__init__(params, dict(lr=lr))

    def _update_group(self, group):
        for p in group["params"]:
            if p.grad is not None:
                p.add_(p.grad * (-0.5 * group["lr"]))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("optimizer", [SignSGD, HalvingSGD])
def test_a_new_optimizer_in_kiln_ops_needs_no_compiler_change(optimizer, backend: str) -> None:
    build = lambda: {"model": (m := _model()), "opt": optimizer(m.parameters(), lr=0.1)}

    def faster(env, i):
        if i == 3:
            env["opt"].param_groups[0]["lr"] = 0.02

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, _, compiled = _both(build, _plain_step, backend, between=faster)
    assert compiled.stats.fallbacks == 0 and compiled.stats.traces <= 2  # the lr change did not retrace


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_optimizer_over_tensors_the_step_does_not_touch(backend: str) -> None:
    extra = {}

    def build():
        m = _model()
        extra["t"] = kiln.ones(3, dtype="float64", requires_grad=True)
        return {"model": m, "opt": kiln.optim.Adam([*m.parameters(), extra["t"]], lr=0.01, weight_decay=0.1)}

    _, _, compiled = _both(build, _plain_step, backend)
    assert compiled.stats.fallbacks == 0
    np.testing.assert_array_equal(extra["t"].detach().numpy(), np.ones(3))  # no grad: untouched, as eagerly
    assert extra["t"].grad is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_parameter_added_after_the_first_call_is_updated(backend: str) -> None:
    def build():
        m = _model()
        return {"model": m, "opt": kiln.optim.SGD(m[0].parameters(), lr=0.1, momentum=0.9)}

    def add_head(env, i):
        if i == 3:
            env["opt"].add_param_group({"params": list(env["model"][2].parameters()), "lr": 0.05})

    _, _, compiled = _both(build, _plain_step, backend, between=add_head)
    assert compiled.stats.traces == 4  # each first step (state created) and the new parameters retrace
    assert "parameters or state changed" in compiled.explain()


def _two_optimizers(env: dict):
    model, first, second = env["model"], env["first"], env["second"]

    def train_step(x, y):
        first.zero_grad()
        second.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        first.step()
        second.step()
        return loss

    return train_step


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_optimizers_in_one_step(backend: str) -> None:
    def build():
        m = _model()
        return {"model": m, "first": kiln.optim.SGD(m[0].parameters(), lr=0.1, momentum=0.9),
                "second": kiln.optim.AdamW(m[2].parameters(), lr=0.01)}

    _, _, compiled = _both(build, _two_optimizers, backend)
    assert compiled.stats.fallbacks == 0 and compiled.stats.traces == 2


@pytest.mark.parametrize("zero", ["optimizer_keep_zeros", "module", "at_the_end", "none"])
def test_gradients_reset_in_other_ways(zero: str) -> None:
    def step_of(env):
        model, opt = env["model"], env["opt"]

        def train_step(x, y):
            if zero == "optimizer_keep_zeros":
                opt.zero_grad(set_to_none=False)
            elif zero == "module":
                model.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if zero == "at_the_end":
                opt.zero_grad()
            return loss

        return train_step

    build = lambda: {"model": (m := _model()), "opt": kiln.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)}
    _, _, compiled = _both(build, step_of, "interpret")
    assert compiled.stats.fallbacks == 0 and compiled.stats.traces == 2


def test_backward_inside_and_the_step_outside() -> None:
    def step_of(env):
        model = env["model"]

        def forward_backward(x, y):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss

        return forward_backward

    def step_outside(env, i):
        if i:
            env["opt"].step()
            env["opt"].zero_grad()

    build = lambda: {"model": (m := _model()), "opt": kiln.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)}
    _, _, compiled = _both(build, step_of, "interpret", between=step_outside)
    assert compiled.stats.traces == 1  # .grad is set on every call; the eager step reads it


def test_a_closure_passed_to_step() -> None:
    def step_of(env):
        model, opt = env["model"], env["opt"]

        def train_step(x, y):
            def closure():
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                return loss

            return opt.step(closure)

        return train_step

    build = lambda: {"model": (m := _model()), "opt": kiln.optim.RMSprop(m.parameters(), lr=0.01)}
    _, _, compiled = _both(build, step_of, "interpret")
    assert compiled.stats.fallbacks == 0


class PlainStepSGD(kiln.optim.Optimizer):
    """Its own step() (no decorator), reading and writing self.state and self.param_groups directly."""

    def __init__(self, params, lr: float = 0.01, momentum: float = 0.5):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    def step(self):
        with kiln.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if "buf" not in self.state[p]:
                        self.state[p]["buf"] = kiln.zeros_like(p)
                    self.state[p]["buf"].mul_(group["momentum"]).add_(p.grad)
                    p.sub_(self.state[p]["buf"] * group["lr"])


def test_optimizer_state_written_by_user_code_is_no_side_effect_under_fullgraph() -> None:
    build = lambda: {"model": (m := _model()), "opt": PlainStepSGD(m.parameters(), lr=0.1)}

    def faster(env, i):
        if i == 3:
            env["opt"].param_groups[0]["momentum"] = 0.9

    runs = []
    for mode in ("eager", "compiled"):
        env = build()
        step = _plain_step(env)
        f = kiln.compile(step, fullgraph=True) if mode == "compiled" else step
        out = []
        for i, (x, y) in enumerate(_data()):
            faster(env, i)
            out.append(float(f(x, y)))
        runs.append(out)
    assert runs[0] == runs[1]
    assert f.stats.traces == 2


def test_state_read_before_the_step_is_read_through_its_path() -> None:
    w = kiln.ones(3, dtype="float64", requires_grad=True)
    opt = kiln.optim.SGD([w], lr=0.1, momentum=0.9)
    w.grad = kiln.ones(3, dtype="float64")
    opt.step()

    @kiln.compile
    def scaled(x):
        return x * opt.state[w]["momentum_buffer"]

    x = kiln.ones(3, dtype="float64")
    assert scaled(x).tolist() == [1.0] * 3
    saved = opt.state_dict()
    saved["state"][0]["momentum_buffer"] = kiln.full((3,), 2.0, dtype="float64")
    opt.load_state_dict(saved)  # new state tensors: the plan reads the new ones
    assert scaled(x).tolist() == [2.0] * 3
    assert scaled.stats.traces == 1


def test_gradients_accumulated_across_calls_keep_both_plans() -> None:
    def step_of(env):
        model = env["model"]

        def forward_backward(x, y):
            loss = F.cross_entropy(model(x), y) / 4
            loss.backward()  # adds to .grad: None at the first micro-batch, set at the others
            return loss

        return forward_backward

    def step_every_4(env, i):
        if i and i % 4 == 0:
            env["opt"].step()
            env["opt"].zero_grad()

    build = lambda: {"model": (m := _model()), "opt": kiln.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)}
    _, _, compiled = _both(build, step_of, "interpret", between=step_every_4, n=16)
    assert compiled.stats.traces == 2  # one plan for .grad None at entry, one for .grad set; both kept
    assert "the .grad of a tensor read by the step was None when traced" in compiled.explain()


@pytest.mark.parametrize("backend", BACKENDS)
def test_clipping_and_stepping_grads_from_an_eager_backward(backend: str) -> None:
    """Grads left by an eager backward are inputs; clipping them in place writes them back."""
    runs = []
    for mode in (None, backend):
        model = _model()
        opt = kiln.optim.Adam(model.parameters(), lr=0.01)

        def clip_and_step():
            total = kiln.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            opt.step()
            return total

        f = kiln.compile(clip_and_step, backend=mode) if mode else clip_and_step
        out = []
        for x, y in _data():
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            held = model[0].weight.grad  # the user's reference: clipped in place, as eagerly
            out += [float(f()), float(held.abs().sum())]
        runs.append((out, [p.detach().numpy() for p in model.parameters()]))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-12)
    for a, b in zip(runs[1][1], runs[0][1]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    assert f.stats.fallbacks == 0 and f.stats.traces == 2


def test_zero_grad_inside_a_compiled_forward_with_backward_outside() -> None:
    def step_of(env):
        model, opt = env["model"], env["opt"]

        def forward(x):
            opt.zero_grad()
            return model(x)  # requires grad: a training plan, whose grads the eager backward fills

        def train_step(x, y):
            loss = F.cross_entropy(env["compiled"](x), y)
            loss.backward()
            opt.step()
            return loss

        env["compiled"] = kiln.compile(forward) if env["mode"] else forward
        return train_step

    for mode in (None, "interpret"):
        env = {"model": (m := _model()), "opt": kiln.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), "mode": mode}
        step = step_of(env)
        losses = [float(step(x, y)) for x, y in _data()]
        if mode is None:
            want = losses
    assert losses == want
    stats = env["compiled"].stats
    assert stats.fallbacks == 0 and env["compiled"].cache_entries[0].kind == "training"
