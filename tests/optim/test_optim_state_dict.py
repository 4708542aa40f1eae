"""Optimizer state_dict: PyTorch layout, exact resume, no aliasing, PyTorch interop, clear errors."""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import kiln
import kiln.optim
from optim_trajectories import as_numpy, gradients, initial_params, kiln_params, run_kiln, run_torch

RESUME_CASES = [
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True)),
    ("Adadelta", dict(lr=0.5, rho=0.8, weight_decay=0.01)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)),
]


def test_layout_matches_pytorch() -> None:
    a, b, c = kiln_params(initial_params("float32"))[:3]
    opt = kiln.optim.Adam([{"params": [a, b]}, {"params": [c], "lr": 0.5}], lr=0.1)
    a.grad = kiln.ones(*a.shape)
    c.grad = kiln.ones(*c.shape)
    opt.step()
    sd = opt.state_dict()
    assert set(sd) == {"state", "param_groups"}
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2]]
    assert [g["lr"] for g in sd["param_groups"]] == [0.1, 0.5]
    assert sorted(sd["state"]) == [0, 2]
    assert sorted(sd["state"][0]) == ["exp_avg", "exp_avg_sq", "step"]
    assert all(isinstance(v, kiln.Tensor) for v in sd["state"][0].values())
    assert sd["state"][0]["step"].item() == 1.0 and sd["state"][0]["step"].dtype == kiln.float32


@pytest.mark.parametrize("snapshot", ["deepcopy", "pickle"])
@pytest.mark.parametrize("name, kwargs", RESUME_CASES, ids=[c[0] for c in RESUME_CASES])
def test_resume_follows_the_uninterrupted_trajectory(name: str, kwargs: dict, snapshot: str) -> None:
    grads = gradients("float64", 20)
    cls = getattr(kiln.optim, name)

    params = kiln_params(initial_params("float64"))
    opt = cls(params, **kwargs)
    run_kiln(opt, params, grads[:10])
    saved_params = [p.numpy(force=True).copy() for p in params]
    if snapshot == "deepcopy":
        saved = copy.deepcopy(opt.state_dict())
    else:
        saved = pickle.loads(pickle.dumps(opt.state_dict()))
    run_kiln(opt, params, grads[10:])

    resumed = kiln_params(saved_params)
    opt2 = cls(resumed, lr=123.0)  # options come from the state dict
    opt2.load_state_dict(saved)
    assert opt2.param_groups[0]["lr"] == kwargs["lr"]
    run_kiln(opt2, resumed, grads[10:])
    for p, q in zip(params, resumed):
        np.testing.assert_array_equal(p.numpy(force=True), q.numpy(force=True))


def test_loaded_state_does_not_alias_the_source() -> None:
    params = kiln_params(initial_params("float64"))
    opt = kiln.optim.SGD(params, lr=0.1, momentum=0.9)
    run_kiln(opt, params, gradients("float64", 2))
    sd = opt.state_dict()
    other = kiln_params(initial_params("float64"))
    opt2 = kiln.optim.SGD(other, lr=0.1, momentum=0.9)
    opt2.load_state_dict(sd)
    before = opt2.state[other[0]]["momentum_buffer"].numpy().copy()
    run_kiln(opt, params, gradients("float64", 2, seed=5))  # mutates opt's buffers in place
    np.testing.assert_array_equal(opt2.state[other[0]]["momentum_buffer"].numpy(), before)
    opt2.param_groups[0]["lr"] = 0.5
    assert opt.param_groups[0]["lr"] == 0.1


def test_load_casts_state_to_the_param_dtype() -> None:
    p64 = kiln_params(initial_params("float64"))
    opt = kiln.optim.Adam(p64, lr=0.01)
    run_kiln(opt, p64, gradients("float64", 3))
    p32 = kiln_params(initial_params("float32"))
    opt32 = kiln.optim.Adam(p32, lr=0.01)
    opt32.load_state_dict(opt.state_dict())
    state = opt32.state[p32[0]]
    assert state["exp_avg"].dtype == kiln.float32 and state["step"].dtype == kiln.float32
    run_kiln(opt32, p32, gradients("float32", 2))


def test_loads_a_pytorch_state_dict() -> None:
    torch = pytest.importorskip("torch")
    grads = gradients("float64", 20)
    t_params = [torch.tensor(a, requires_grad=True) for a in initial_params("float64")]
    t_opt = torch.optim.AdamW(t_params, lr=0.01, weight_decay=0.1, amsgrad=True, foreach=False)
    run_torch(t_opt, t_params, grads[:10])

    k_params = kiln_params([as_numpy(p).copy() for p in t_params])
    k_opt = kiln.optim.AdamW(k_params)
    k_opt.load_state_dict(t_opt.state_dict())
    assert k_opt.param_groups[0]["amsgrad"] is True
    run_torch(t_opt, t_params, grads[10:])
    run_kiln(k_opt, k_params, grads[10:])
    for kp, tp in zip(k_params, t_params):
        np.testing.assert_allclose(as_numpy(kp), as_numpy(tp), rtol=1e-12, atol=1e-12)


# ---- errors ------------------------------------------------------------------------------
def _trained_sgd(groups: list[int]) -> kiln.optim.SGD:
    params = [kiln.randn(2, requires_grad=True) for _ in range(sum(groups))]
    split, start = [], 0
    for n in groups:
        split.append({"params": params[start:start + n]})
        start += n
    opt = kiln.optim.SGD(split, lr=0.1, momentum=0.9)
    for p in params:
        p.grad = kiln.ones(2)
    opt.step()
    return opt


def test_error_on_a_different_number_of_groups() -> None:
    with pytest.raises(ValueError, match="2 parameter groups, but the optimizer has 1"):
        _trained_sgd([1]).load_state_dict(_trained_sgd([1, 1]).state_dict())


def test_error_on_a_different_group_size() -> None:
    with pytest.raises(ValueError, match="parameter group 1 has 3 parameters, but the optimizer's group 1 has 2"):
        _trained_sgd([1, 2]).load_state_dict(_trained_sgd([1, 3]).state_dict())


def test_error_on_missing_keys() -> None:
    with pytest.raises(ValueError, match="keys 'state' and 'param_groups', got \\['state'\\]"):
        _trained_sgd([1]).load_state_dict({"state": {}})


def test_error_on_state_for_an_unknown_index() -> None:
    sd = _trained_sgd([1]).state_dict()
    sd["state"][7] = sd["state"].pop(0)
    with pytest.raises(ValueError, match="parameter index 7"):
        _trained_sgd([1]).load_state_dict(sd)


def test_error_on_a_state_shape_mismatch() -> None:
    sd = _trained_sgd([1]).state_dict()
    sd["state"][0]["momentum_buffer"] = kiln.zeros(5)
    with pytest.raises(ValueError, match=r"'momentum_buffer' for parameter 0 has shape \(5,\), but the parameter "
                                         r"has shape \(2,\)"):
        _trained_sgd([1]).load_state_dict(sd)


def test_error_on_a_bad_saved_hyperparameter() -> None:
    sd = _trained_sgd([1]).state_dict()
    sd["param_groups"][0]["lr"] = -1.0
    with pytest.raises(ValueError, match="Invalid learning rate: -1.0"):
        _trained_sgd([1]).load_state_dict(sd)
