"""Optimizer base behaviour: param groups, zero_grad, in-place updates, closures, validation."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.optim
from kiln.optim import SGD, Adam, AdamW, RMSprop

ALL = [SGD, Adam, AdamW, RMSprop]


def _param(*shape: int) -> kiln.Tensor:
    return kiln.randn(*shape, requires_grad=True)


# ---- construction and param groups ----------------------------------------------------
def test_importable_as_subpackage() -> None:
    import kiln.optim.lr_scheduler as sched

    assert kiln.optim.SGD is SGD and sched.StepLR is kiln.optim.lr_scheduler.StepLR


def test_defaults_fill_each_group() -> None:
    a, b = _param(2), _param(3)
    opt = SGD([{"params": [a]}, {"params": b, "lr": 0.5, "momentum": 0.1}], lr=0.1, momentum=0.9)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert [g["momentum"] for g in opt.param_groups] == [0.9, 0.1]
    assert len(opt.param_groups[1]["params"]) == 1 and opt.param_groups[1]["params"][0] is b
    assert opt.defaults["lr"] == 0.1


def test_accepts_generators_and_named_parameters() -> None:
    a, b = _param(2), _param(3)
    opt = Adam(p for p in [a, b])
    assert opt.param_groups[0]["params"][0] is a and len(opt.param_groups[0]["params"]) == 2
    named = Adam([("w", a), ("b", b)])
    assert named.param_groups[0]["param_names"] == ["w", "b"]
    assert named.param_groups[0]["params"][1] is b


def test_add_param_group() -> None:
    a, b = _param(2), _param(3)
    opt = Adam([a], lr=0.1)
    opt.add_param_group({"params": [b], "lr": 0.01})
    assert len(opt.param_groups) == 2 and opt.param_groups[1]["betas"] == (0.9, 0.999)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(KeyError, match="'params'"):
        opt.add_param_group({"lr": 0.1})


@pytest.mark.parametrize("params, error, match", [
    ([], ValueError, "empty parameter list"),
    (kiln.zeros(2, requires_grad=True), TypeError, "iterable of Tensors"),
    ({kiln.zeros(2, requires_grad=True)}, TypeError, "ordered collections"),
    ([np.zeros(2)], TypeError, "can only optimize Tensors, but one of the params is ndarray"),
])
def test_bad_params(params, error, match) -> None:
    with pytest.raises(error, match=match):
        SGD(params, lr=0.1)


def test_non_leaf_and_duplicate_params_rejected() -> None:
    a = _param(2)
    with pytest.raises(ValueError, match="non-leaf"):
        SGD([a * 2], lr=0.1)
    with pytest.raises(ValueError, match="duplicate"):
        SGD([a, a], lr=0.1)


@pytest.mark.parametrize("cls, kwargs, match", [
    (SGD, dict(lr=-1.0), r"Invalid learning rate: -1.0"),
    (SGD, dict(lr=0.1, momentum=-0.5), r"Invalid momentum value: -0.5"),
    (SGD, dict(lr=0.1, weight_decay=-1e-4), r"Invalid weight_decay value: -0.0001"),
    (SGD, dict(lr=0.1, nesterov=True), r"Nesterov momentum requires a momentum and zero dampening"),
    (SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), r"dampening=0.1"),
    (Adam, dict(lr=-0.001), r"Invalid learning rate: -0.001"),
    (Adam, dict(eps=-1e-8), r"Invalid epsilon value: -1e-08"),
    (Adam, dict(betas=(1.0, 0.999)), r"Invalid beta parameter at index 0: 1.0"),
    (Adam, dict(betas=(0.9, -0.1)), r"Invalid beta parameter at index 1: -0.1"),
    (Adam, dict(betas=0.9), r"Invalid betas: 0.9"),
    (Adam, dict(weight_decay=-0.1), r"Invalid weight_decay value: -0.1"),
    (AdamW, dict(weight_decay=-0.1), r"Invalid weight_decay value: -0.1"),
    (AdamW, dict(betas=(0.9, 1.5)), r"Invalid beta parameter at index 1: 1.5"),
    (RMSprop, dict(lr=-0.01), r"Invalid learning rate: -0.01"),
    (RMSprop, dict(alpha=-0.5), r"Invalid alpha value: -0.5"),
    (RMSprop, dict(eps=-1.0), r"Invalid epsilon value: -1.0"),
    (RMSprop, dict(momentum=-0.9), r"Invalid momentum value: -0.9"),
    (RMSprop, dict(weight_decay=-2.0), r"Invalid weight_decay value: -2.0"),
])
def test_bad_hyperparameters_name_the_value(cls, kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        cls([_param(2)], **kwargs)


def test_bad_hyperparameter_in_a_group_is_caught() -> None:
    with pytest.raises(ValueError, match=r"Invalid learning rate: -0.5"):
        Adam([{"params": [_param(2)]}, {"params": [_param(2)], "lr": -0.5}])


def test_repr_lists_groups() -> None:
    text = repr(SGD([_param(2)], lr=0.1, momentum=0.9))
    assert text.startswith("SGD (") and "Parameter Group 0" in text and "momentum: 0.9" in text


# ---- zero_grad --------------------------------------------------------------------------
def test_zero_grad_set_to_none() -> None:
    a, b = _param(2), _param(3)
    ((a * 2).sum() + (b * b).sum()).backward()
    opt = SGD([a, b], lr=0.1)
    opt.zero_grad()
    assert a.grad is None and b.grad is None


def test_zero_grad_to_zeros_then_accumulate() -> None:
    a, b = _param(2), _param(2)
    loss = lambda: (a * 2).sum() + (a + b).sum()  # noqa: E731 - grads that alias/broadcast in the engine
    loss().backward()
    opt = SGD([a, b], lr=0.1)
    opt.zero_grad(set_to_none=False)
    for p in (a, b):
        assert p.grad is not None and p.grad.shape == p.shape
        np.testing.assert_array_equal(p.grad.numpy(), np.zeros(p.shape))
    loss().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.full(2, 3.0))
    np.testing.assert_allclose(b.grad.numpy(), np.ones(2))


def test_zero_grad_in_place_for_a_plain_grad_tensor() -> None:
    a = _param(3)
    a.grad = kiln.ones(3)
    grad = a.grad
    SGD([a], lr=0.1).zero_grad(set_to_none=False)
    assert a.grad is grad
    np.testing.assert_array_equal(grad.numpy(), np.zeros(3))


# ---- step: in place, no grad, versions, closure -------------------------------------------
@pytest.mark.parametrize("cls", ALL)
def test_step_updates_in_place_and_bumps_version(cls) -> None:
    p = _param(4, 3)
    data, version = p._data, p._version
    view = p.detach()  # shares storage, as modules and compiled plans do
    before = p.numpy(force=True).copy()
    p.grad = kiln.ones(4, 3)
    cls([p], lr=0.1).step()
    assert p._data is data
    assert p._version == version + 1
    assert not np.allclose(p.numpy(force=True), before)
    np.testing.assert_array_equal(view.numpy(), p.numpy(force=True))
    assert p.is_leaf and p.requires_grad and p.grad_fn is None


@pytest.mark.parametrize("cls", ALL)
def test_backward_through_a_tensor_saved_before_step_raises(cls) -> None:
    p = _param(3)
    y = (p * p).sum()  # saves p
    p.grad = kiln.ones(3)
    cls([p], lr=0.1).step()
    with pytest.raises(RuntimeError, match="version"):
        y.backward()


def test_params_without_grad_are_skipped() -> None:
    a, b = _param(2), _param(2)
    before = b.numpy(force=True).copy()
    a.grad = kiln.ones(2)
    opt = Adam([a, b], lr=0.1)
    opt.step()
    np.testing.assert_array_equal(b.numpy(force=True), before)
    assert b not in opt.state and a in opt.state


def test_step_runs_closure_with_grad_and_returns_loss() -> None:
    w = kiln.tensor([1.0, -2.0], requires_grad=True)
    opt = SGD([w], lr=0.25)
    seen = {}

    def closure():
        seen["grad_enabled"] = kiln.is_grad_enabled()
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    with kiln.no_grad():
        loss = opt.step(closure)
    assert seen["grad_enabled"] is True
    assert loss.item() == pytest.approx(5.0)
    np.testing.assert_allclose(w.numpy(force=True), [0.5, -1.0])  # w - 0.25 * 2w


def test_step_itself_runs_without_grad() -> None:
    class Spy(kiln.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, dict(lr=0.1))
            self.modes = []

        def _update_group(self, group):
            self.modes.append(kiln.is_grad_enabled())

    opt = Spy([_param(2)])
    opt.step()
    assert opt.modes == [False] and kiln.is_grad_enabled()


def test_base_class_needs_an_update_rule() -> None:
    opt = kiln.optim.Optimizer([_param(2)], dict(lr=0.1))
    with pytest.raises(NotImplementedError, match="_update_group"):
        opt.step()


# ---- inside kiln.compile ------------------------------------------------------------------
def _train_step_fn():
    w = kiln.zeros(3, requires_grad=True)
    opt = SGD([w], lr=0.1)

    def train_step(x, y):
        opt.zero_grad()
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    return train_step


def test_step_in_a_compiled_function_is_captured() -> None:
    pytest.importorskip("kiln.jit")
    x = kiln.randn(8, 3)
    y = x @ kiln.tensor([1.0, 2.0, 3.0])
    eager = _train_step_fn()
    expected = [eager(x, y).item() for _ in range(4)]
    compiled = kiln.compile(_train_step_fn())
    got = [compiled(x, y).item() for _ in range(4)]
    assert got == expected  # every call really stepped
    assert compiled.stats.fallbacks == 0 and compiled.stats.hits >= 2


def test_step_in_a_fullgraph_compiled_function_is_one_graph() -> None:
    pytest.importorskip("kiln.jit")
    x = kiln.randn(8, 3)
    eager = _train_step_fn()
    expected = [eager(x, x.sum(axis=1)).item() for _ in range(3)]
    compiled = kiln.compile(_train_step_fn(), fullgraph=True)
    assert [compiled(x, x.sum(axis=1)).item() for _ in range(3)] == expected
