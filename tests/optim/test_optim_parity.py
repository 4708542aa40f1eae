"""Each optimizer and option combination follows PyTorch's trajectory: params and state, 20 steps."""
from __future__ import annotations

import numpy as np
import pytest

import kiln.optim
from optim_trajectories import (
    as_numpy, assert_state_matches, gradients, initial_params, kiln_params, run_kiln, run_torch,
)

torch = pytest.importorskip("torch")

STEPS = 20
TOL = {"float32": (1e-6, 1e-6), "float64": (1e-12, 1e-12)}

CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.5)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("SGD", dict(lr=0.1, weight_decay=0.1)),
    ("SGD", dict(lr=0.1, maximize=True)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.1, weight_decay=0.01, maximize=True)),
    ("SGD", dict(lr=0.05, momentum=0.8, weight_decay=0.01, nesterov=True, maximize=True)),
    ("Adam", dict()),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99))),
    ("Adam", dict(lr=0.01, betas=(0.3, 0.4))),  # the other branch of lerp
    ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("Adam", dict(lr=0.01, eps=1e-3, maximize=True)),
    ("Adam", dict(lr=0.01, weight_decay=0.1, amsgrad=True, maximize=True)),
    ("AdamW", dict()),
    ("AdamW", dict(lr=0.01, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01, weight_decay=0.0)),
    ("AdamW", dict(lr=0.01, amsgrad=True, maximize=True)),
    ("AdamW", dict(lr=0.01, betas=(0.5, 0.9), weight_decay=0.3, amsgrad=True)),
    ("RMSprop", dict()),
    ("RMSprop", dict(lr=0.001, alpha=0.9)),
    ("RMSprop", dict(lr=0.001, alpha=0.3, centered=True)),  # the other branch of lerp
    ("RMSprop", dict(lr=0.001, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.001, momentum=0.9)),
    ("RMSprop", dict(lr=0.001, centered=True)),
    ("RMSprop", dict(lr=0.001, maximize=True)),
    ("RMSprop", dict(lr=0.001, alpha=0.95, eps=1e-4, weight_decay=0.05, momentum=0.5, centered=True,
                     maximize=True)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8)),
    ("Adadelta", dict(lr=0.5, eps=1e-3, weight_decay=0.1)),
    ("Adadelta", dict(lr=0.2, rho=0.95, weight_decay=0.05, maximize=True)),
    ("Adagrad", dict()),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05)),
    ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.3, eps=1e-6)),
    ("Adagrad", dict(lr=0.05, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.05, lr_decay=0.01, weight_decay=0.05, initial_accumulator_value=0.1, maximize=True)),
]


def _ids(case: tuple[str, dict]) -> str:
    name, kwargs = case
    return name + "(" + ",".join(f"{k}={v}" for k, v in kwargs.items()) + ")"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_trajectory_matches_torch(case: tuple[str, dict], dtype: str) -> None:
    name, kwargs = case
    init = initial_params(dtype)
    grads = gradients(dtype, STEPS)

    k_params = kiln_params(init)
    k_opt = getattr(kiln.optim, name)(k_params, **kwargs)
    t_params = [torch.tensor(a, requires_grad=True) for a in init]
    t_opt = getattr(torch.optim, name)(t_params, foreach=False, **kwargs)

    k_path: list[list[np.ndarray]] = []
    t_path: list[list[np.ndarray]] = []
    run_kiln(k_opt, k_params, grads, after_step=lambda: k_path.append([as_numpy(p).copy() for p in k_params]))
    run_torch(t_opt, t_params, grads, after_step=lambda: t_path.append([as_numpy(p).copy() for p in t_params]))

    rtol, atol = TOL[dtype]
    for step, (k_step, t_step) in enumerate(zip(k_path, t_path)):
        for i, (kp, tp) in enumerate(zip(k_step, t_step)):
            np.testing.assert_allclose(kp, tp, rtol=rtol, atol=atol, err_msg=f"param {i} after step {step}")
    assert_state_matches(k_opt, t_opt, rtol, atol)
    for kp in k_params:
        assert kp._data.dtype == np.dtype(dtype)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop"])
def test_two_param_groups_with_own_options_match_torch(name: str) -> None:
    init = initial_params("float64")
    grads = gradients("float64", 10)
    extra = {"SGD": dict(momentum=0.9), "Adam": dict(amsgrad=True), "AdamW": dict(weight_decay=0.2),
             "RMSprop": dict(centered=True)}[name]

    def groups(params):
        return [{"params": params[:2], "lr": 0.01}, {"params": params[2:], "lr": 0.003, **extra}]

    k_params = kiln_params(init)
    t_params = [torch.tensor(a, requires_grad=True) for a in init]
    k_opt = getattr(kiln.optim, name)(groups(k_params), lr=0.1)
    t_opt = getattr(torch.optim, name)(groups(t_params), lr=0.1, foreach=False)
    run_kiln(k_opt, k_params, grads)
    run_torch(t_opt, t_params, grads)
    for kp, tp in zip(k_params, t_params):
        np.testing.assert_allclose(as_numpy(kp), as_numpy(tp), rtol=1e-12, atol=1e-12)
    assert_state_matches(k_opt, t_opt, 1e-12, 1e-12)
