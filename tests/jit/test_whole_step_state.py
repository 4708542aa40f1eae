"""State of a compiled whole training step: checkpoints round trip between compiled and eager
training, hyperparameters are read fresh on every call without retracing, and ``.grad`` is
left as eager leaves it."""
from __future__ import annotations

import copy
import weakref

import numpy as np
import pytest

import kiln
from whole_step_helpers import MODELS, OPTIMIZERS, PAIRS, RTOL, assert_same_optimizer_state, batch, loss_of

pytestmark = pytest.mark.filterwarnings("error")


class Trainer:
    """A model, its optimizer and one train_step function, eager or compiled."""

    def __init__(self, optimizer: str, dtype: str, backend: str | None, seed: int = 0, model: str = "mlp"):
        kiln.manual_seed(seed)
        self.model = MODELS[model]().to(dtype)
        self.optimizer = OPTIMIZERS[optimizer](self.model.parameters())
        self.step = kiln.compile(self._train_step, backend=backend) if backend else self._train_step
        self.dtype, self.name = dtype, model

    def _train_step(self, x: kiln.Tensor, y: kiln.Tensor) -> kiln.Tensor:
        self.optimizer.zero_grad()
        loss = loss_of(self.model, x, y)
        loss.backward()
        self.optimizer.step()
        return loss

    def run(self, rng: np.random.Generator, steps: int) -> list[float]:
        return [float(self.step(*batch(self.name, rng, self.dtype))) for _ in range(steps)]

    def checkpoint(self) -> tuple[dict, dict]:
        return copy.deepcopy(self.model.state_dict()), copy.deepcopy(self.optimizer.state_dict())

    def restore(self, checkpoint: tuple[dict, dict]) -> None:
        self.model.load_state_dict(checkpoint[0])
        self.optimizer.load_state_dict(checkpoint[1])


def _assert_same(a: Trainer, b: Trainer, dtype: str) -> None:
    for (name, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=RTOL[dtype], atol=1e-9, err_msg=name)
    assert_same_optimizer_state(a.optimizer, b.optimizer, RTOL[dtype], 1e-9)


@pytest.mark.parametrize("backend, dtype", PAIRS)
@pytest.mark.parametrize("optimizer", ["sgd_nesterov_wd", "adamw_amsgrad", "rmsprop"])
@pytest.mark.parametrize("first, then", [("compiled", "eager"), ("eager", "compiled")])
def test_a_checkpoint_resumes_across_modes(optimizer: str, first: str, then: str, backend: str, dtype: str) -> None:
    reference = Trainer(optimizer, dtype, None)
    want = reference.run(np.random.default_rng(1), 12)

    rng = np.random.default_rng(1)
    before = Trainer(optimizer, dtype, backend if first == "compiled" else None)
    got = before.run(rng, 6)
    checkpoint = before.checkpoint()
    after = Trainer(optimizer, dtype, backend if then == "compiled" else None, seed=99)  # other weights
    after.restore(checkpoint)
    got += after.run(rng, 6)
    np.testing.assert_allclose(got, want, rtol=RTOL[dtype], atol=0)
    _assert_same(after, reference, dtype)


@pytest.mark.parametrize("backend, dtype", PAIRS)
def test_state_dict_after_compiled_steps_equals_eager(backend: str, dtype: str) -> None:
    eager, compiled = Trainer("adamw_amsgrad", dtype, None), Trainer("adamw_amsgrad", dtype, backend)
    eager.run(np.random.default_rng(1), 5)
    compiled.run(np.random.default_rng(1), 5)
    saved = compiled.optimizer.state_dict()
    assert set(saved["state"]) == set(range(4))
    for entries in saved["state"].values():
        assert sorted(entries) == ["exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"]
        assert entries["step"].dtype == kiln.float32 and float(entries["step"]) == 5.0
    _assert_same(compiled, eager, dtype)


@pytest.mark.parametrize("backend, dtype", PAIRS)
def test_loading_state_into_the_same_optimizer_is_seen_by_the_plan(backend: str, dtype: str) -> None:
    runs = []
    for mode in (None, backend):
        trainer = Trainer("adamw_amsgrad", dtype, mode)
        rng = np.random.default_rng(1)
        trainer.run(rng, 3)
        checkpoint = trainer.checkpoint()
        losses = trainer.run(rng, 3)
        trainer.restore(checkpoint)  # new state tensors: the plan reads them by their place in .state
        losses += trainer.run(rng, 3)
        runs.append((losses, trainer))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=RTOL[dtype], atol=0)
    _assert_same(runs[1][1], runs[0][1], dtype)
    assert runs[1][1].step.stats.traces == 2


@pytest.mark.parametrize("backend, dtype", PAIRS)
@pytest.mark.parametrize("optimizer, changes", [
    ("sgd_nesterov_wd", [("lr", 0.01), ("momentum", 0.5), ("weight_decay", 0.1)]),
    ("adamw_amsgrad", [("lr", 3e-3), ("betas", (0.8, 0.99)), ("eps", 1e-6), ("weight_decay", 0.2)]),
    ("rmsprop", [("lr", 3e-3), ("alpha", 0.9), ("momentum", 0.9)]),
])
def test_hyperparameter_changes_take_effect_without_retracing(optimizer: str, changes: list, backend: str,
                                                               dtype: str) -> None:
    runs = []
    for mode in (None, backend):
        trainer = Trainer(optimizer, dtype, mode)
        rng = np.random.default_rng(1)
        losses = trainer.run(rng, 3)
        for key, value in changes:  # a hand edit of param_groups between calls
            trainer.optimizer.param_groups[0][key] = value
            losses += trainer.run(rng, 2)
        runs.append((losses, trainer))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=RTOL[dtype], atol=0)
    _assert_same(runs[1][1], runs[0][1], dtype)
    stats = runs[1][1].step.stats
    assert stats.traces == 2 and stats.fallbacks == 0  # the first step creates state; no change retraces


@pytest.mark.parametrize("backend, dtype", PAIRS)
def test_a_change_that_takes_another_branch_retraces(backend: str, dtype: str) -> None:
    runs = []
    for mode in (None, backend):
        trainer = Trainer("sgd_dampening", dtype, mode)
        rng = np.random.default_rng(1)
        losses = trainer.run(rng, 3)
        trainer.optimizer.param_groups[0]["dampening"] = 0.0  # `if 1 - dampening != 1` changes its answer
        losses += trainer.run(rng, 3)
        runs.append((losses, trainer))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=RTOL[dtype], atol=0)
    compiled = runs[1][1].step
    assert compiled.stats.traces == 3
    assert "hyperparameter guard" in compiled.explain() and "dampening" in compiled.explain()


@pytest.mark.parametrize("backend, dtype", PAIRS)
def test_grads_after_a_compiled_step_are_eagers(backend: str, dtype: str) -> None:
    eager, compiled = Trainer("sgd_nesterov_wd", dtype, None), Trainer("sgd_nesterov_wd", dtype, backend)
    eager.run(np.random.default_rng(1), 4)
    rng = np.random.default_rng(1)
    losses = [compiled.step(*batch("mlp", rng, dtype)) for _ in range(4)]
    grads = [p.grad for p in compiled.model.parameters()]
    for g, q in zip(grads, eager.model.parameters()):
        np.testing.assert_allclose(g.numpy(), q.grad.numpy(), rtol=RTOL[dtype], atol=1e-9)
    owners = [g._data.base if g._data.base is not None else g._data for g in grads]
    assert len({id(o) for o in owners}) == len(owners)  # no two grads share memory
    assert not losses[-1].requires_grad  # backward ran inside: the returned loss is detached


@pytest.mark.parametrize("backend, dtype", PAIRS)
def test_a_scheduler_outside_the_step_is_seen(backend: str, dtype: str) -> None:
    runs = []
    for mode in (None, backend):
        trainer = Trainer("sgd_nesterov_wd", dtype, mode)
        schedule = kiln.optim.lr_scheduler.StepLR(trainer.optimizer, step_size=2, gamma=0.5)
        rng = np.random.default_rng(1)
        losses = []
        for _ in range(6):
            losses += trainer.run(rng, 1)
            schedule.step()
        runs.append((losses, trainer))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=RTOL[dtype], atol=0)
    _assert_same(runs[1][1], runs[0][1], dtype)
    assert runs[1][1].step.stats.traces == 2


@pytest.mark.parametrize("optimizer, creates_state", [("adamw_amsgrad", True), ("sgd_nesterov_wd", True),
                                                      ("sgd", False)])
def test_a_first_step_that_creates_optimizer_state_is_not_compiled(optimizer: str, creates_state: bool,
                                                                   monkeypatch) -> None:
    """Its plan would be guarded on the state not existing yet, so the next call could not use it:
    the first call runs as traced, the second compiles, and every result equals eager's."""
    import kiln.jit.function as function

    builds = []
    real_build = function.build_entry
    monkeypatch.setattr(function, "build_entry", lambda *a, **k: builds.append(1) or real_build(*a, **k))
    monkeypatch.setitem(OPTIMIZERS, "sgd", lambda ps: kiln.optim.SGD(ps, lr=0.05))  # keeps no state
    reference = Trainer(optimizer, "float64", None)
    compiled = Trainer(optimizer, "float64", "cpu")
    want = reference.run(np.random.default_rng(3), 3)
    rng = np.random.default_rng(3)
    got = compiled.run(rng, 1)
    assert len(builds) == (0 if creates_state else 1)
    assert compiled.step.stats.cache_size == len(builds) and compiled.step.stats.misses == 1
    if creates_state:
        assert "not compiled: this call changed what its plan is guarded on" in compiled.step.explain()
    got += compiled.run(rng, 2)
    assert len(builds) == 1 and compiled.step.stats.hits == 2 - creates_state
    assert compiled.step.stats.evictions == 0
    np.testing.assert_allclose(got, want, rtol=RTOL["float64"])
    _assert_same(compiled, reference, "float64")


def test_a_whole_step_trace_frees_forward_arrays_once_backward_is_done_with_them():
    # A step that runs backward needs no compiled backward, so its trace holds no real tensor beyond
    # the point where the step's own code and the backward pass let go of it (as eager would).
    w = kiln.randn(6, 6, requires_grad=True)
    alive_after_backward = []

    def step(x):
        a = x @ w  # relu saves its output, so only the trace could keep `a` alive
        ref = weakref.ref(a)
        loss = kiln.relu(a).sum()
        del a
        loss.backward()
        alive_after_backward.append(ref() is not None)
        return loss.detach()

    x = kiln.randn(4, 6)
    compiled = kiln.compile(step)
    loss = compiled(x)
    assert alive_after_backward == [False]
    grad = w.grad.numpy().copy()
    w.grad = None
    np.testing.assert_array_equal(loss.numpy(), step(x).numpy())
    np.testing.assert_array_equal(grad, w.grad.numpy())
