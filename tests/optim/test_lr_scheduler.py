"""LR schedulers: lr sequences equal PyTorch's for 30 epochs on an optimizer with two param groups."""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest

import kiln
import kiln.optim
from kiln.optim import lr_scheduler as ks

torch = pytest.importorskip("torch")
ts = torch.optim.lr_scheduler

EPOCHS = 30


def _half(epoch: int) -> float:
    return 0.5 ** (epoch // 4)


CASES: dict[str, Callable[[Any, Any], Any]] = {
    "StepLR": lambda m, opt: m.StepLR(opt, step_size=7, gamma=0.5),
    "StepLR-default-gamma": lambda m, opt: m.StepLR(opt, step_size=3),
    "MultiStepLR": lambda m, opt: m.MultiStepLR(opt, milestones=[5, 12, 12, 20], gamma=0.3),
    "ExponentialLR": lambda m, opt: m.ExponentialLR(opt, gamma=0.9),
    "LinearLR-warmup": lambda m, opt: m.LinearLR(opt, start_factor=0.2, total_iters=8),
    "LinearLR-decay": lambda m, opt: m.LinearLR(opt, start_factor=1.0, end_factor=0.1, total_iters=10),
    "ConstantLR": lambda m, opt: m.ConstantLR(opt, factor=0.25, total_iters=6),
    "ConstantLR-default": lambda m, opt: m.ConstantLR(opt),
    "CosineAnnealingLR": lambda m, opt: m.CosineAnnealingLR(opt, T_max=10, eta_min=0.001),
    "CosineAnnealingLR-odd": lambda m, opt: m.CosineAnnealingLR(opt, T_max=7),
    "LambdaLR": lambda m, opt: m.LambdaLR(opt, lr_lambda=lambda e: 0.95 ** e),
    "LambdaLR-per-group": lambda m, opt: m.LambdaLR(opt, lr_lambda=[_half, lambda e: 1.0 / (e + 1)]),
}


def _optimizers() -> tuple[kiln.optim.Optimizer, Any]:
    """A kiln SGD and a torch SGD, each with two param groups (lr 0.1 and 0.02)."""
    kp = [kiln.zeros(2, requires_grad=True), kiln.zeros(3, requires_grad=True)]
    tp = [torch.zeros(2, requires_grad=True), torch.zeros(3, requires_grad=True)]
    k = kiln.optim.SGD([{"params": kp[:1]}, {"params": kp[1:], "lr": 0.02}], lr=0.1, momentum=0.9)
    t = torch.optim.SGD([{"params": tp[:1]}, {"params": tp[1:], "lr": 0.02}], lr=0.1, momentum=0.9)
    return k, t


def _lr_path(opt: Any, schedulers: list[Any], epochs: int = EPOCHS) -> list[list[float]]:
    path = [[g["lr"] for g in opt.param_groups]]
    for _ in range(epochs):
        opt.step()
        for sched in schedulers:
            sched.step()
        path.append(list(schedulers[-1].get_last_lr()))
        assert path[-1] == [g["lr"] for g in opt.param_groups]
    return path


@pytest.mark.parametrize("name", list(CASES))
def test_lr_sequence_matches_torch(name: str) -> None:
    k_opt, t_opt = _optimizers()
    k_path = _lr_path(k_opt, [CASES[name](ks, k_opt)])
    t_path = _lr_path(t_opt, [CASES[name](ts, t_opt)])
    np.testing.assert_allclose(k_path, t_path, rtol=1e-12, atol=0)


def test_chained_schedulers_match_torch() -> None:
    def make(m, opt):
        return [m.LinearLR(opt, start_factor=0.5, total_iters=4), m.CosineAnnealingLR(opt, T_max=12, eta_min=1e-3)]

    k_opt, t_opt = _optimizers()
    np.testing.assert_allclose(_lr_path(k_opt, make(ks, k_opt)), _lr_path(t_opt, make(ts, t_opt)), rtol=1e-12)


@pytest.mark.parametrize("name", ["StepLR", "MultiStepLR", "ExponentialLR", "LinearLR-warmup", "CosineAnnealingLR",
                                  "ConstantLR"])
def test_step_with_an_explicit_epoch_uses_the_closed_form(name: str) -> None:
    k_opt, t_opt = _optimizers()
    k_sched, t_sched = CASES[name](ks, k_opt), CASES[name](ts, t_opt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in [3, 9, 4, 17, 25]:
            k_sched.step(epoch)
            t_sched.step(epoch)
            np.testing.assert_allclose(k_sched.get_last_lr(), t_sched.get_last_lr(), rtol=1e-12)
    with pytest.warns(UserWarning, match="deprecated"):
        k_sched.step(3)


@pytest.mark.parametrize("name", ["StepLR", "CosineAnnealingLR", "LinearLR-warmup", "LambdaLR"])
def test_scheduler_state_dict_resumes(name: str) -> None:
    opt, _ = _optimizers()
    sched = CASES[name](ks, opt)
    _lr_path(opt, [sched], 10)
    opt_state, sched_state = opt.state_dict(), sched.state_dict()
    assert sched_state["last_epoch"] == 10 and "optimizer" not in sched_state
    expected = _lr_path(opt, [sched], 15)

    opt2, _ = _optimizers()
    sched2 = CASES[name](ks, opt2)
    sched2.load_state_dict(sched_state)
    opt2.load_state_dict(opt_state)
    assert _lr_path(opt2, [sched2], 15) == expected


def test_initial_lr_is_recorded_and_get_last_lr_is_a_copy() -> None:
    opt, _ = _optimizers()
    sched = ks.ExponentialLR(opt, gamma=0.5)
    assert [g["initial_lr"] for g in opt.param_groups] == [0.1, 0.02]
    assert sched.base_lrs == [0.1, 0.02] and sched.last_epoch == 0
    sched.get_last_lr().append(99.0)
    assert sched.get_last_lr() == [0.1, 0.02]


def test_resuming_needs_initial_lr() -> None:
    opt, _ = _optimizers()
    with pytest.raises(KeyError, match="initial_lr"):
        ks.StepLR(opt, step_size=2, last_epoch=5)


def test_resuming_with_last_epoch_continues_the_schedule() -> None:
    k_opt, t_opt = _optimizers()
    for opt in (k_opt, t_opt):
        for g in opt.param_groups:
            g["initial_lr"] = g["lr"]
    k = ks.CosineAnnealingLR(k_opt, T_max=10, last_epoch=4)
    t = ts.CosineAnnealingLR(t_opt, T_max=10, last_epoch=4)
    np.testing.assert_allclose(_lr_path(k_opt, [k], 10), _lr_path(t_opt, [t], 10), rtol=1e-12)


@pytest.mark.parametrize("make, error, match", [
    (lambda opt: ks.StepLR(object(), step_size=2), TypeError, "object is not an Optimizer"),
    (lambda opt: ks.StepLR(opt, step_size=0), ValueError, "Invalid step_size: 0"),
    (lambda opt: ks.CosineAnnealingLR(opt, T_max=0), ValueError, "Invalid T_max: 0"),
    (lambda opt: ks.LinearLR(opt, start_factor=0.0), ValueError, "Invalid start_factor: 0.0"),
    (lambda opt: ks.LinearLR(opt, end_factor=1.5), ValueError, "Invalid end_factor: 1.5"),
    (lambda opt: ks.LinearLR(opt, total_iters=0), ValueError, "Invalid total_iters: 0"),
    (lambda opt: ks.LambdaLR(opt, lr_lambda=[_half]), ValueError, "Expected 2 lr_lambdas"),
])
def test_bad_arguments(make, error, match) -> None:
    opt, _ = _optimizers()
    with pytest.raises(error, match=match):
        make(opt)
