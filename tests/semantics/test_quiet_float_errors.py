"""inf and NaN come back quietly, as in PyTorch: no NumPy RuntimeWarning from eager ops, backward or compiled plans."""
from __future__ import annotations

import warnings
from typing import Callable

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")

INF = float("inf")

# name -> (function of one input, written against either library; the input values)
CASES: dict[str, tuple[Callable, list]] = {
    "log-of-zero": (lambda m, x: m.log(x), [0.0, 1.0, 2.0]),
    "log1p-of-minus-one": (lambda m, x: m.log1p(x), [-1.0, 0.0]),
    "divide-by-zero": (lambda m, x: 1.0 / x, [0.0, -0.0, 2.0]),
    "zero-over-zero": (lambda m, x: x / x, [0.0, 3.0]),
    "exp-overflow": (lambda m, x: m.exp(x), [1000.0, 1.0]),
    "sqrt-of-negative": (lambda m, x: m.sqrt(x), [-1.0, 4.0]),
    "inf-minus-inf": (lambda m, x: x - x, [INF, 1.0]),
    "inf-times-zero": (lambda m, x: x * 0.0, [INF, 2.0]),
    "pow-of-zero": (lambda m, x: x ** -1.0, [0.0, 2.0]),
    "sum-overflow": (lambda m, x: (x * 3e38).sum(), [1.0, 1.0]),
    "matmul-with-inf": (lambda m, x: x.reshape(1, 2) @ (x * 0.0).reshape(2, 1), [INF, 1.0]),
    "masked-softmax": (lambda m, x: m.softmax(x.reshape(2, 2) + m.log((x > 0.5).float()).reshape(2, 2), dim=-1),
                       [0.0, 1.0, 2.0, 3.0]),
}

# float32 cases whose exp/log the cpu backend fuses as its own vectorized versions, within 4 ulp of
# NumPy's (tests/tolerances.py C_EXPR_ULPS); a softmax's division and its gradient add a few more
FUSED_TRANSCENDENTALS = {"log-of-zero", "exp-overflow", "masked-softmax"}


def _quietly(fn: Callable[[], object]) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn()


@pytest.mark.parametrize("name", list(CASES))
def test_eager_values_and_grads_are_torchs_without_warnings(name: str) -> None:
    f, values = CASES[name]
    x = kiln.tensor(values, requires_grad=True)
    out = _quietly(lambda: f(kiln, x))
    _quietly(lambda: out.sum().backward())
    tx = torch.tensor(values, requires_grad=True)
    t_out = f(torch, tx)
    t_out.sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), t_out.detach().numpy(), rtol=1e-6)  # inf and NaN where torch has them
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
@pytest.mark.parametrize("name", list(CASES))
def test_compiled_plans_are_quiet_and_equal_eager(name: str, backend: str) -> None:
    f, values = CASES[name]

    def step(x: kiln.Tensor) -> tuple[kiln.Tensor, kiln.Tensor]:
        out = f(kiln, x)
        (grad,) = kiln.grad(out.sum(), [x])
        return out, grad

    compiled = kiln.compile(step, backend=backend)
    x = kiln.tensor(values, requires_grad=True)
    eager_out, eager_grad = _quietly(lambda: step(x))
    for _ in range(2):  # the tracing call and a replay
        out, grad = _quietly(lambda: compiled(x))
        for got, want in ((out, eager_out), (grad, eager_grad)):
            if backend == "cpu" and name in FUSED_TRANSCENDENTALS:  # inf/NaN still exactly where eager has them
                np.testing.assert_array_max_ulp(got.detach().numpy(), want.detach().numpy(), maxulp=8)
            else:
                np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())


def test_overflowing_casts_and_literals_are_quiet() -> None:
    big = kiln.tensor([60000.0], dtype=kiln.float16)
    assert _quietly(lambda: (big * 2.0).tolist()) == [INF] == (torch.tensor([60000.0], dtype=torch.float16) * 2).tolist()
    assert _quietly(lambda: (big * 1e6).tolist()) == [INF]
    _quietly(lambda: kiln.tensor([float("nan"), INF]).long())  # undefined values in PyTorch too; no warning


def test_numpys_own_warnings_outside_kiln_are_left_alone() -> None:
    with pytest.warns(RuntimeWarning, match="divide by zero"):
        np.log(np.zeros(1))


def test_the_users_numpy_error_state_is_kept_around_kiln_ops() -> None:
    with np.errstate(all="raise"):
        assert _quietly(lambda: kiln.log(kiln.zeros(1)).item()) == -INF  # kiln ops: quiet even so
        with pytest.raises(FloatingPointError):
            np.log(np.zeros(1))  # the user's own NumPy code: still raises
    assert np.geterr()["divide"] == "warn"


@pytest.mark.parametrize("numpy_2_fast_path", [True, False])
def test_quiet_restores_the_state_after_an_exception(numpy_2_fast_path: bool, monkeypatch) -> None:
    from kiln.ops import quiet as quiet_module

    if not numpy_2_fast_path:
        monkeypatch.setattr(quiet_module, "_ERRSTATE", None)  # the np.errstate path of NumPy < 2

    def kernel(fail: bool) -> np.ndarray:
        out = np.log(np.zeros(1))
        if fail:
            raise ValueError("kernel failed")
        return out

    wrapped = quiet_module.quiet(kernel)
    assert _quietly(lambda: wrapped(False))[0] == -INF
    with pytest.raises(ValueError, match="kernel failed"):
        wrapped(True)
    assert np.geterr()["divide"] == "warn"
    assert quiet_module.quiet(wrapped) is wrapped  # never wrapped twice


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta"])
def test_optimizer_steps_on_inf_and_nan_gradients_are_quiet_and_match_torch(name: str) -> None:
    values, grads = [1.0, 2.0, 3.0], [INF, float("nan"), -INF]
    w = kiln.tensor(values, requires_grad=True)
    tw = torch.tensor(values, requires_grad=True)
    opt, topt = getattr(kiln.optim, name)([w], lr=0.1), getattr(torch.optim, name)([tw], lr=0.1)
    for _ in range(2):
        w.grad, tw.grad = kiln.tensor(grads), torch.tensor(grads)
        _quietly(opt.step)
        topt.step()
    np.testing.assert_array_equal(w.detach().numpy(), tw.detach().numpy())


def test_creating_a_tensor_that_overflows_its_dtype_is_quiet() -> None:
    assert _quietly(lambda: kiln.tensor([1e40, -1e40]).tolist()) == [INF, -INF] == torch.tensor([1e40, -1e40]).tolist()
    assert _quietly(lambda: kiln.tensor(1e5, dtype=kiln.float16).item()) == INF
