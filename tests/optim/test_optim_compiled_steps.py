"""Whole training steps under kiln.compile with the newer optimizers and schedulers: the eager trajectory, no fallback."""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln import nn
from kiln.optim import lr_scheduler as ks

OPTIMIZERS: dict[str, Callable[[Any], kiln.optim.Optimizer]] = {
    "adadelta": lambda ps: kiln.optim.Adadelta(ps, lr=0.5, rho=0.85, weight_decay=0.01),
    "adadelta-maximize": lambda ps: kiln.optim.Adadelta(ps, lr=0.3, eps=1e-4, maximize=True),
    "adagrad": lambda ps: kiln.optim.Adagrad(ps, lr=0.05, lr_decay=0.01, initial_accumulator_value=0.1),
    "adagrad-wd": lambda ps: kiln.optim.Adagrad(ps, lr=0.05, weight_decay=0.05, eps=1e-6),
    "sgd-momentum": lambda ps: kiln.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adam": lambda ps: kiln.optim.Adam(ps, lr=0.01),
}

SCHEDULERS: dict[str, Callable[[kiln.optim.Optimizer], Any]] = {
    "none": lambda opt: None,
    "one-cycle": lambda opt: ks.OneCycleLR(opt, max_lr=0.1, total_steps=12,
                                           cycle_momentum="momentum" in opt.defaults or "betas" in opt.defaults),
    "plateau": lambda opt: ks.ReduceLROnPlateau(opt, patience=0, factor=0.7),
    "warmup-cosine": lambda opt: ks.SequentialLR(opt, [ks.LinearLR(opt, start_factor=0.2, total_iters=3),
                                                       ks.CosineAnnealingLR(opt, T_max=9)], milestones=[3]),
}

STEPS = 12


def _run(opt_name: str, sched_name: str, compiled: bool, backend: str, dtype: str) -> tuple[list, Any]:
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3)).to(dtype)
    opt = OPTIMIZERS[opt_name](model.parameters())
    sched = SCHEDULERS[sched_name](opt)

    def train_step(x: kiln.Tensor, y: kiln.Tensor) -> kiln.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    step = kiln.compile(train_step, backend=backend) if compiled else train_step
    rng = np.random.default_rng(1)
    path = []
    for _ in range(STEPS):
        x = kiln.tensor(rng.standard_normal((8, 6)), dtype=dtype)
        y = kiln.tensor(rng.integers(0, 3, 8))
        loss = step(x, y)
        if isinstance(sched, ks.ReduceLROnPlateau):
            sched.step(-loss.item())  # "worse" every other step or so: the lr keeps changing
        elif sched is not None:
            sched.step()
        path.append([loss.item()] + [float(v) for p in model.parameters() for v in p.detach().numpy().ravel()[:4]])
    return path, step


@pytest.mark.parametrize("backend, dtype", [("interpret", "float64"), ("cpu", "float32")])
@pytest.mark.parametrize("sched_name", list(SCHEDULERS))
@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_compiled_whole_step_follows_eager(opt_name: str, sched_name: str, backend: str, dtype: str) -> None:
    eager, _ = _run(opt_name, sched_name, False, backend, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no graph break, no fallback warning
        compiled, step = _run(opt_name, sched_name, True, backend, dtype)
    # Adagrad's state exists from the start: one plan; the others' first step creates state: a plan of its own
    # (SGD's momentum buffer is created on the first step too). OneCycleLR's momentum/betas are read per call.
    assert step.stats.fallbacks == 0 and step.stats.traces == (1 if opt_name.startswith("adagrad") else 2)
    np.testing.assert_allclose(compiled, eager, rtol=1e-6 if dtype == "float32" else 1e-12, atol=1e-7)
