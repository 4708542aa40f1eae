"""The native (fused) eager optimizer step: bit for bit the NumPy update, for every option.

Each case runs the same optimizer twice over the same gradients, once with ``fused=True``
(one generated C kernel per dtype) and once with ``fused=False`` (the NumPy path, which
tests/optim/test_optim_parity.py checks against PyTorch), and compares parameters and
state as raw bits.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import kiln
from kiln.optim import native_kernel, native_step
from kiln.tensor import Tensor

pytestmark = pytest.mark.skipif(native_kernel.compiler_problem() is not None, reason="no working C compiler")

# sizes 0 and 1, a 0-d parameter, odd sizes, and a matrix whose gradient is a transposed view
SHAPES = [(0,), (), (1,), (7,), (33, 17), (5, 4)]
STRIDED = 5  # index in SHAPES of the parameter that gets non-contiguous gradients

CASES = [
    (kiln.optim.SGD, {}),
    (kiln.optim.SGD, dict(momentum=0.9)),
    (kiln.optim.SGD, dict(momentum=0.9, dampening=0.3)),
    (kiln.optim.SGD, dict(momentum=0.9, nesterov=True, weight_decay=0.01)),
    (kiln.optim.SGD, dict(momentum=0.5, weight_decay=0.1, maximize=True)),
    (kiln.optim.SGD, dict(maximize=True)),
    (kiln.optim.Adam, {}),
    (kiln.optim.Adam, dict(amsgrad=True, weight_decay=0.1)),
    (kiln.optim.Adam, dict(betas=(0.3, 0.99), maximize=True)),  # lerp's other branch (weight >= 0.5)
    (kiln.optim.Adam, dict(amsgrad=True, maximize=True, eps=1e-3)),
    (kiln.optim.AdamW, {}),
    (kiln.optim.AdamW, dict(amsgrad=True, weight_decay=0.5)),
    (kiln.optim.AdamW, dict(weight_decay=0.0, maximize=True)),
    (kiln.optim.RMSprop, {}),
    (kiln.optim.RMSprop, dict(centered=True)),
    (kiln.optim.RMSprop, dict(momentum=0.9, centered=True, weight_decay=0.1)),
    (kiln.optim.RMSprop, dict(momentum=0.5, maximize=True)),
    (kiln.optim.RMSprop, dict(alpha=0.3, centered=True)),
    (kiln.optim.Adagrad, {}),
    (kiln.optim.Adagrad, dict(lr_decay=0.1, weight_decay=0.1, initial_accumulator_value=0.5)),
    (kiln.optim.Adagrad, dict(maximize=True)),
    (kiln.optim.Adadelta, {}),
    (kiln.optim.Adadelta, dict(weight_decay=0.1, maximize=True, rho=0.3)),
]


def _ids(case: tuple) -> str:
    cls, kwargs = case
    return cls.__name__ + "".join(f"-{k}={v}" for k, v in kwargs.items())


def _params(dtype: type, seed: int = 0) -> list[Tensor]:
    rng = np.random.default_rng(seed)
    return [Tensor._wrap(rng.standard_normal(shape).astype(dtype)).requires_grad_(True) for shape in SHAPES]


def _set_grads(params: list[Tensor], rng: np.random.Generator) -> None:
    for i, p in enumerate(params):
        if i == STRIDED:
            g = rng.standard_normal(p.shape[::-1]).astype(p._data.dtype).T  # a transposed view
            assert not g.flags.c_contiguous
        else:
            g = rng.standard_normal(p.shape).astype(p._data.dtype)
        p.grad = Tensor._wrap(g)


def _train(cls: type, kwargs: dict, fused: bool, dtype: type, steps: int = 4,
           lr: float = 0.05) -> tuple[list[Tensor], kiln.optim.Optimizer]:
    params = _params(dtype)
    opt = cls(params, lr=lr, fused=fused, **kwargs)
    rng = np.random.default_rng(1)
    for step in range(steps):
        _set_grads(params, rng)
        if step == 2:
            opt.param_groups[0]["lr"] = lr * 0.5  # a schedule: scalars are read on every step
        opt.step()
    return params, opt


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _assert_same_bits(a: np.ndarray, b: np.ndarray, what: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, what
    mismatch = _bits(a) != _bits(b)
    assert not mismatch.any(), f"{what}: {int(mismatch.sum())} elements differ, e.g. {a[mismatch][:3]} vs {b[mismatch][:3]}"


def _assert_same_training(native: tuple, numpy: tuple) -> None:
    (p_native, opt_native), (p_numpy, opt_numpy) = native, numpy
    for i, (a, b) in enumerate(zip(p_native, p_numpy)):
        _assert_same_bits(a._data, b._data, f"parameter {i}")
        state_a, state_b = opt_native.state[a], opt_numpy.state[b]
        assert sorted(state_a) == sorted(state_b), f"parameter {i}'s state keys"
        for key in state_a:
            _assert_same_bits(np.asarray(state_a[key]._data), np.asarray(state_b[key]._data), f"state {key} of {i}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_native_step_equals_numpy_bitwise(case: tuple, dtype: type) -> None:
    cls, kwargs = case
    _assert_same_training(_train(cls, kwargs, True, dtype), _train(cls, kwargs, False, dtype))


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_native_step_runs_no_numpy_update(case: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """With contiguous gradients the default (fused=None) step never calls the NumPy update."""
    cls, kwargs = case
    params = _params(np.float32)[:STRIDED]
    opt = cls(params, lr=0.05, **kwargs)
    monkeypatch.setattr(cls, "_update_group", lambda self, group: pytest.fail("NumPy path used"))
    rng = np.random.default_rng(2)
    for _ in range(2):
        _set_grads(params, rng)
        opt.step()


def test_inf_and_nan_gradients_match_numpy() -> None:
    for cls, kwargs in [(kiln.optim.Adam, dict(amsgrad=True)), (kiln.optim.SGD, dict(momentum=0.9)),
                        (kiln.optim.RMSprop, dict(centered=True))]:
        runs = []
        for fused in (True, False):
            w = Tensor._wrap(np.array([1.0, -2.0, 3.0, 0.5], np.float32)).requires_grad_(True)
            opt = cls([w], lr=0.1, fused=fused, **kwargs)
            for g in ([np.inf, 1.0, np.nan, -0.0], [1.0, -np.inf, 2.0, 0.0]):
                w.grad = Tensor._wrap(np.array(g, np.float32))
                opt.step()
            runs.append(w._data.copy())
        np.testing.assert_array_equal(runs[0], runs[1])  # NaN where NaN, inf where inf, equal elsewhere


def test_mixed_dtypes_and_parameters_without_grad() -> None:
    def run(fused: bool) -> list[np.ndarray]:
        a, b, c = (_params(np.float32)[4], _params(np.float64)[4], _params(np.float32)[3])
        opt = kiln.optim.Adam([a, b, c], lr=0.01, amsgrad=True, fused=fused)
        rng = np.random.default_rng(3)
        for step in range(3):
            for p in (a, b):
                p.grad = Tensor._wrap(rng.standard_normal(p.shape).astype(p._data.dtype))
            c.grad = Tensor._wrap(rng.standard_normal(c.shape).astype(np.float32)) if step == 1 else None
            opt.step()
        return [p._data.copy() for p in (a, b, c)] + [opt.state[c]["step"]._data.copy()]

    for x, y in zip(run(True), run(False)):
        _assert_same_bits(x, y, "mixed dtypes")


def test_state_is_updated_in_place_and_versions_bump() -> None:
    params = _params(np.float32)
    opt = kiln.optim.Adam(params, lr=0.01)
    rng = np.random.default_rng(4)
    _set_grads(params, rng)
    opt.step()
    p = params[4]
    exp_avg = opt.state[p]["exp_avg"]
    arr, data = exp_avg._data, p._data
    versions = (p._version, exp_avg._version)
    _set_grads(params, rng)
    opt.step()
    assert opt.state[p]["exp_avg"] is exp_avg and exp_avg._data is arr and p._data is data
    assert p._version > versions[0] and exp_avg._version > versions[1]


def test_state_dict_round_trip_between_native_and_numpy() -> None:
    """A checkpoint of native steps resumes on the NumPy path (and back) with the same bits."""
    params, opt = _train(kiln.optim.AdamW, dict(amsgrad=True), True, np.float32, steps=3)
    saved_params = [p._data.copy() for p in params]
    saved = copy.deepcopy(opt.state_dict())
    assert saved["param_groups"][0]["fused"] is True and saved["param_groups"][0]["foreach"] is None

    def resume(fused: bool) -> list[np.ndarray]:
        ps = [Tensor._wrap(a.copy()).requires_grad_(True) for a in saved_params]
        o = kiln.optim.AdamW(ps, lr=0.05, amsgrad=True)
        o.load_state_dict(saved)
        o.param_groups[0]["fused"] = fused
        rng = np.random.default_rng(5)
        for _ in range(3):
            _set_grads(ps, rng)
            o.step()
        return [p._data.copy() for p in ps]

    for x, y in zip(resume(True), resume(False)):
        _assert_same_bits(x, y, "resumed")


def test_non_contiguous_state_falls_back_per_parameter() -> None:
    """A loaded state laid out differently from its parameter goes to NumPy, with the same answer."""
    def run(fused: bool) -> np.ndarray:
        w = _params(np.float32)[4]
        opt = kiln.optim.SGD([w], lr=0.1, momentum=0.9, fused=fused)
        buf = np.asfortranarray(np.ones(w.shape, np.float32))
        opt.state[w]["momentum_buffer"] = Tensor._wrap(buf)
        w.grad = Tensor._wrap(np.full(w.shape, 0.5, np.float32))
        opt.step()
        assert opt.state[w]["momentum_buffer"]._data is buf
        return w._data.copy()

    _assert_same_bits(run(True), run(False), "fallback")


def test_gradient_of_another_dtype_falls_back() -> None:
    runs = []
    for fused in (True, False):
        w = _params(np.float32)[3]
        opt = kiln.optim.SGD([w], lr=0.1, fused=fused)
        w.grad = Tensor._wrap(np.linspace(-1, 1, 7))  # float64 gradient for a float32 parameter
        opt.step()
        runs.append(w._data.copy())
    _assert_same_bits(runs[0], runs[1], "float64 grad")


def test_subclass_with_its_own_update_keeps_it() -> None:
    calls = []

    class Tracked(kiln.optim.SGD):
        def _update_group(self, group):
            calls.append(len(group["params"]))
            super()._update_group(group)

    w = _params(np.float32)[3]
    opt = Tracked([w], lr=0.1)
    w.grad = Tensor._wrap(np.ones(7, np.float32))
    opt.step()
    assert calls == [1]
    with pytest.raises(ValueError, match="no native update"):
        Tracked([w], lr=0.1, fused=True)


def test_foreach_false_uses_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_step, "native_update_group", None)  # would raise TypeError if called
    monkeypatch.setattr(kiln.optim.optimizer, "native_update_group", None)
    w = _params(np.float32)[3]
    opt = kiln.optim.Adam([w], lr=0.1, foreach=False)
    w.grad = Tensor._wrap(np.ones(7, np.float32))
    opt.step()
    opt = kiln.optim.Adam([w], lr=0.1, fused=False)
    opt.step()


def test_without_a_compiler_auto_falls_back_silently_and_fused_true_raises(monkeypatch: pytest.MonkeyPatch,
                                                                       recwarn: pytest.WarningsRecorder) -> None:
    from kiln.jit.backends.cpu.toolchain import CompilerUnavailable

    monkeypatch.setattr(kiln.optim.optimizer, "compiler_problem", lambda: "no C compiler found")
    expected = _train(kiln.optim.RMSprop, dict(momentum=0.9), False, np.float32)
    got = _train(kiln.optim.RMSprop, dict(momentum=0.9), None, np.float32)
    _assert_same_training(got, expected)
    assert not recwarn.list
    with pytest.raises(CompilerUnavailable, match=r"fused=True\) needs a working C compiler.*fused=None"):
        kiln.optim.SGD(_params(np.float32), lr=0.1, fused=True)
    # a group whose fused=True was loaded or edited in, stepped without a compiler
    w = _params(np.float32)[3]
    opt = kiln.optim.SGD([w], lr=0.1)
    dict.__setitem__(opt.param_groups[0], "fused", True)
    w.grad = Tensor._wrap(np.ones(7, np.float32))
    with pytest.raises(CompilerUnavailable, match="install gcc or clang"):
        opt.step()


def test_bad_flags() -> None:
    w = _params(np.float32)[3]
    with pytest.raises(ValueError, match="`fused` and `foreach` cannot be `True` together"):
        kiln.optim.Adam([w], fused=True, foreach=True)
    with pytest.raises(TypeError, match="fused must be None, True or False, got 'yes'"):
        kiln.optim.Adam([w], fused="yes")
    half = Tensor._wrap(np.ones(3, np.float16)).requires_grad_(True)
    with pytest.raises(ValueError, match="fused=True requires float32 or float64 parameters"):
        kiln.optim.SGD([half], lr=0.1, fused=True)
    opt = kiln.optim.SGD([half], lr=0.1)  # fused=None: float16 takes the NumPy path
    half.grad = Tensor._wrap(np.ones(3, np.float16))
    opt.step()
    np.testing.assert_array_equal(half._data, np.full(3, 0.8999, np.float16))


def test_model_training_matches_torch() -> None:
    """An MLP trained with the default (native) AdamW against torch's, on the same data."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    w1, w2 = rng.standard_normal((8, 5)), rng.standard_normal((3, 8))
    k_params = [Tensor._wrap(w.copy()).requires_grad_(True) for w in (w1, w2)]
    t_params = [torch.tensor(w.copy(), requires_grad=True) for w in (w1, w2)]
    k_opt = kiln.optim.AdamW(k_params, lr=0.01, weight_decay=0.1, amsgrad=True)
    t_opt = torch.optim.AdamW(t_params, lr=0.01, weight_decay=0.1, amsgrad=True, foreach=False)
    for _ in range(5):
        x, y = rng.standard_normal((4, 5)), rng.standard_normal((4, 3))
        k_opt.zero_grad()
        (((kiln.tensor(x) @ k_params[0].T).tanh() @ k_params[1].T - kiln.tensor(y)) ** 2).mean().backward()
        k_opt.step()
        t_opt.zero_grad()
        (((torch.tensor(x) @ t_params[0].T).tanh() @ t_params[1].T - torch.tensor(y)) ** 2).mean().backward()
        t_opt.step()
    for k, t in zip(k_params, t_params):
        np.testing.assert_allclose(k.detach().numpy(), t.detach().numpy(), rtol=1e-12, atol=1e-14)
