"""OneCycleLR, ReduceLROnPlateau, SequentialLR and ChainedScheduler: lr (and momentum) paths equal PyTorch's."""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest

import kiln
import kiln.optim
from kiln.optim import lr_scheduler as ks
from optim_trajectories import as_numpy, gradients, initial_params, kiln_params, run_kiln, run_torch

torch = pytest.importorskip("torch")
ts = torch.optim.lr_scheduler


def _pair(opt_name: str, **kwargs: Any) -> tuple[kiln.optim.Optimizer, Any]:
    """The same optimizer in kiln and torch, with two param groups (the second at a fifth of the lr)."""
    kp = [kiln.zeros(2, requires_grad=True), kiln.zeros(3, requires_grad=True)]
    tp = [torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)]
    lr = kwargs.pop("lr", 0.1)
    k = getattr(kiln.optim, opt_name)([{"params": kp[:1]}, {"params": kp[1:], "lr": lr / 5}], lr=lr, **kwargs)
    t = getattr(torch.optim, opt_name)([{"params": tp[:1]}, {"params": tp[1:], "lr": lr / 5}], lr=lr, **kwargs)
    return k, t


def _options(opt: Any) -> list:
    """Per group: lr, and momentum or betas where the optimizer has them."""
    out = []
    for g in opt.param_groups:
        out.append([g["lr"], g.get("momentum", 0.0), *g.get("betas", (0.0, 0.0))])
    return out


def _path(opt: Any, sched: Any, steps: int, metrics: list[float] | None = None) -> list:
    path = [_options(opt)]
    for i in range(steps):
        opt.step()
        if metrics is None:
            sched.step()
        else:
            sched.step(metrics[i])
        path.append(_options(opt))
        assert list(sched.get_last_lr()) == [g["lr"] for g in opt.param_groups]
    return path


ONE_CYCLE = {
    "sgd-cos": ("SGD", dict(momentum=0.9), dict(max_lr=0.5, total_steps=20)),
    "sgd-linear-three-phase": ("SGD", dict(momentum=0.9), dict(max_lr=[0.5, 0.2], total_steps=25, pct_start=0.4,
                                                             anneal_strategy="linear", three_phase=True)),
    "sgd-epochs": ("SGD", dict(momentum=0.9), dict(max_lr=0.3, epochs=3, steps_per_epoch=7, div_factor=10.0,
                                                   final_div_factor=100.0)),
    "sgd-no-momentum-cycling": ("SGD", dict(), dict(max_lr=0.4, total_steps=15, cycle_momentum=False)),
    "adam-betas": ("Adam", dict(betas=(0.9, 0.99)), dict(max_lr=0.01, total_steps=30, base_momentum=0.8,
                                                         max_momentum=[0.95, 0.9])),
    "adamw-three-phase": ("AdamW", dict(), dict(max_lr=0.01, total_steps=12, three_phase=True)),
}


@pytest.mark.parametrize("name", list(ONE_CYCLE))
def test_one_cycle_lr_and_momentum_match_torch(name: str) -> None:
    opt_name, opt_kwargs, kwargs = ONE_CYCLE[name]
    k_opt, t_opt = _pair(opt_name, **opt_kwargs)
    k_sched, t_sched = ks.OneCycleLR(k_opt, **kwargs), ts.OneCycleLR(t_opt, **kwargs)
    steps = k_sched.total_steps - 1
    np.testing.assert_allclose(_path(k_opt, k_sched, steps), _path(t_opt, t_sched, steps), rtol=1e-12, atol=1e-15)
    for key in ("initial_lr", "max_lr", "min_lr"):
        assert [g[key] for g in k_opt.param_groups] == pytest.approx([g[key] for g in t_opt.param_groups])


def test_one_cycle_refuses_to_step_past_the_end() -> None:
    opt, _ = _pair("SGD", momentum=0.9)
    sched = ks.OneCycleLR(opt, max_lr=0.1, total_steps=4)
    for _ in range(3):
        sched.step()
    sched.step()  # step 4 == total_steps: allowed, as in PyTorch
    with pytest.raises(ValueError, match="Tried to step 5 times. The specified number of total steps is 4"):
        sched.step()


def test_adam_with_one_cycle_follows_torchs_parameter_trajectory() -> None:
    init = initial_params("float64")
    grads = gradients("float64", 16)
    k_params = kiln_params(init)
    t_params = [torch.tensor(a, requires_grad=True) for a in init]
    k_opt = kiln.optim.Adam(k_params, lr=0.01, weight_decay=0.01)
    t_opt = torch.optim.Adam(t_params, lr=0.01, weight_decay=0.01, foreach=False)
    k_sched = ks.OneCycleLR(k_opt, max_lr=0.05, total_steps=16, pct_start=0.25)
    t_sched = ts.OneCycleLR(t_opt, max_lr=0.05, total_steps=16, pct_start=0.25)
    k_path: list = []
    t_path: list = []
    run_kiln(k_opt, k_params, grads, after_step=lambda: (k_sched.step(), k_path.append(
        [as_numpy(p).copy() for p in k_params])))
    run_torch(t_opt, t_params, grads, after_step=lambda: (t_sched.step(), t_path.append(
        [as_numpy(p).copy() for p in t_params])))
    for step, (ks_, ts_) in enumerate(zip(k_path, t_path)):
        for i, (a, b) in enumerate(zip(ks_, ts_)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=f"param {i} after step {step}")


PLATEAU = {
    "min-rel": dict(),
    "min-abs-cooldown": dict(threshold=0.05, threshold_mode="abs", cooldown=2, patience=1, factor=0.5),
    "max-rel": dict(mode="max", patience=2, factor=0.3),
    "max-abs": dict(mode="max", threshold=0.1, threshold_mode="abs", patience=0),
    "min-lr-floor": dict(patience=0, factor=0.1, min_lr=[1e-3, 1e-4]),
    "eps-skips-tiny-changes": dict(patience=0, factor=0.9, eps=1e-3),
}
METRICS = [1.0, 0.9, 0.91, 0.9, 0.95, 0.89, 0.89, 0.88, 1.2, 1.3, 0.5, 0.5, 0.5, 0.5, 0.51, 0.2, 0.3, 0.3, 0.3,
           0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]


@pytest.mark.parametrize("name", list(PLATEAU))
def test_reduce_lr_on_plateau_matches_torch(name: str) -> None:
    k_opt, t_opt = _pair("SGD", momentum=0.9, lr=0.1)
    k_sched, t_sched = ks.ReduceLROnPlateau(k_opt, **PLATEAU[name]), ts.ReduceLROnPlateau(t_opt, **PLATEAU[name])
    metrics = METRICS if PLATEAU[name].get("mode") != "max" else [-m for m in METRICS]
    k_path = _path(k_opt, k_sched, len(metrics), metrics)
    t_path = _path(t_opt, t_sched, len(metrics), metrics)
    np.testing.assert_allclose(k_path, t_path, rtol=1e-12)
    assert k_path[-1] != k_path[0]
    assert (k_sched.best, k_sched.num_bad_epochs, k_sched.cooldown_counter) == (
        t_sched.best, t_sched.num_bad_epochs, t_sched.cooldown_counter)


def test_reduce_lr_on_plateau_takes_a_tensor_metric_and_resumes() -> None:
    opt, _ = _pair("SGD", lr=0.1)
    sched = ks.ReduceLROnPlateau(opt, patience=1)
    for m in [1.0, 1.0, 1.0]:
        sched.step(kiln.tensor(m))
    assert sched.get_last_lr() == pytest.approx([0.01, 0.002])
    state = sched.state_dict()
    assert "optimizer" not in state
    opt2, _ = _pair("SGD", lr=0.1)
    other = ks.ReduceLROnPlateau(opt2, mode="max")
    other.load_state_dict(state)
    assert (other.mode, other.best, other.mode_worse) == ("min", 1.0, float("inf"))


SEQUENTIAL: dict[str, Callable[[Any, Any], Any]] = {
    "warmup-then-cosine": lambda m, opt: m.SequentialLR(opt, [m.LinearLR(opt, start_factor=0.1, total_iters=5),
                                                              m.CosineAnnealingLR(opt, T_max=20, eta_min=1e-4)],
                                                        milestones=[5]),
    "constant-then-exponential": lambda m, opt: m.SequentialLR(opt, [m.ConstantLR(opt, factor=0.1, total_iters=4),
                                                                     m.ExponentialLR(opt, gamma=0.9)],
                                                               milestones=[6]),
    "three-stages": lambda m, opt: m.SequentialLR(opt, [m.LinearLR(opt, start_factor=0.5, total_iters=3),
                                                        m.StepLR(opt, step_size=2, gamma=0.5),
                                                        m.MultiStepLR(opt, milestones=[3, 5], gamma=0.1)],
                                                  milestones=[4, 11]),
    "chained": lambda m, opt: m.ChainedScheduler([m.ConstantLR(opt, factor=0.5, total_iters=3),
                                                  m.ExponentialLR(opt, gamma=0.8)]),
}


@pytest.mark.parametrize("name", list(SEQUENTIAL))
def test_sequential_and_chained_schedulers_match_torch(name: str) -> None:
    k_opt, t_opt = _pair("SGD", momentum=0.9)
    k_sched, t_sched = SEQUENTIAL[name](ks, k_opt), SEQUENTIAL[name](ts, t_opt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # switching schedulers at a milestone is not the deprecated step(epoch)
        k_path = _path(k_opt, k_sched, 25)
    t_path = _path(t_opt, t_sched, 25)
    np.testing.assert_allclose(k_path, t_path, rtol=1e-12)


@pytest.mark.parametrize("name", ["warmup-then-cosine", "three-stages"])
def test_sequential_state_dict_resumes(name: str) -> None:
    opt, _ = _pair("SGD")
    sched = SEQUENTIAL[name](ks, opt)
    _path(opt, sched, 7)
    opt_state, sched_state = opt.state_dict(), sched.state_dict()
    expected = _path(opt, sched, 12)
    opt2, _ = _pair("SGD")
    sched2 = SEQUENTIAL[name](ks, opt2)
    sched2.load_state_dict(sched_state)
    opt2.load_state_dict(opt_state)
    assert _path(opt2, sched2, 12) == expected


def test_one_cycle_state_dict_resumes() -> None:
    opt, _ = _pair("SGD", momentum=0.9)
    sched = ks.OneCycleLR(opt, max_lr=0.5, total_steps=20)
    _path(opt, sched, 8)
    opt_state, sched_state = opt.state_dict(), sched.state_dict()
    expected = _path(opt, sched, 10)
    opt2, _ = _pair("SGD", momentum=0.9)
    sched2 = ks.OneCycleLR(opt2, max_lr=0.5, total_steps=20)  # PyTorch's order: scheduler, then both states
    opt2.load_state_dict(opt_state)
    sched2.load_state_dict(sched_state)
    assert _path(opt2, sched2, 10) == expected


@pytest.mark.parametrize("make, error, match", [
    (lambda o: ks.OneCycleLR(o, max_lr=0.1), ValueError, "total_steps, or both epochs and steps_per_epoch"),
    (lambda o: ks.OneCycleLR(o, max_lr=0.1, total_steps=0), ValueError, "positive integer total_steps"),
    (lambda o: ks.OneCycleLR(o, max_lr=0.1, epochs=2, steps_per_epoch=0), ValueError, "steps_per_epoch"),
    (lambda o: ks.OneCycleLR(o, max_lr=0.1, total_steps=5, pct_start=1.5), ValueError, "pct_start"),
    (lambda o: ks.OneCycleLR(o, max_lr=0.1, total_steps=5, anneal_strategy="exp"), ValueError, "anneal_strategy"),
    (lambda o: ks.OneCycleLR(o, max_lr=[0.1], total_steps=5), ValueError, "expected 2 values for max_lr"),
    (lambda o: ks.ReduceLROnPlateau(o, factor=1.0), ValueError, "Factor should be < 1.0"),
    (lambda o: ks.ReduceLROnPlateau(o, mode="lowest"), ValueError, "mode 'lowest' is unknown"),
    (lambda o: ks.ReduceLROnPlateau(o, threshold_mode="pct"), ValueError, "threshold mode 'pct' is unknown"),
    (lambda o: ks.ReduceLROnPlateau(o, min_lr=[0.1]), ValueError, "expected 2 min_lrs"),
    (lambda o: ks.SequentialLR(o, [ks.ExponentialLR(o, 0.9)], milestones=[3]), ValueError, "one milestone fewer"),
    (lambda o: ks.SequentialLR(o, [], milestones=[]), ValueError, "at least one scheduler"),
    (lambda o: ks.SequentialLR(o, [ks.ReduceLROnPlateau(o), ks.ExponentialLR(o, 0.9)], milestones=[2]),
     ValueError, "does not support ReduceLROnPlateau"),
    (lambda o: ks.SequentialLR(o, [ks.ExponentialLR(_pair("SGD")[0], 0.9)], milestones=[]), ValueError,
     "same optimizer"),
    (lambda o: ks.ConstantLR(o, factor=2.0), ValueError, "Invalid factor: 2.0"),
])
def test_bad_arguments(make, error, match) -> None:
    opt, _ = _pair("SGD", momentum=0.9)
    with pytest.raises(error, match=match):
        make(opt)


def test_one_cycle_needs_momentum_or_betas_to_cycle() -> None:
    opt = kiln.optim.Adagrad([kiln.zeros(2, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="momentum or beta1"):
        ks.OneCycleLR(opt, max_lr=0.1, total_steps=5)
    ks.OneCycleLR(opt, max_lr=0.1, total_steps=5, cycle_momentum=False)
