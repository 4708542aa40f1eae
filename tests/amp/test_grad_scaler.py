"""GradScaler: the same parameters, scales and skipped steps as PyTorch's CPU GradScaler; its state machine."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln.amp import GradScaler

torch = pytest.importorskip("torch")

STEPS = 12
BAD_STEPS = {2, 3, 8}  # the batch holds inf or NaN: the step must be skipped and the scale backed off


def _batches() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    out = []
    for step in range(STEPS):
        x = rng.standard_normal((8, 4)).astype(np.float32)
        y = rng.standard_normal((8, 1)).astype(np.float32)
        if step in BAD_STEPS:
            x[step % 8, step % 4] = np.inf if step % 2 else np.nan
        out.append((x, y))
    return out


def _run(lib, w0: np.ndarray, opt_name: str, clip: bool) -> tuple[list, list, list]:
    w = lib.tensor(w0.copy(), requires_grad=True)
    opt = getattr(lib.optim, opt_name)([w], lr=0.05)
    scaler = lib.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_factor=4.0, backoff_factor=0.25,
                                growth_interval=3)
    ws, scales, trackers = [], [], []
    for x, y in _batches():
        opt.zero_grad()
        loss = ((lib.tensor(x) @ w - lib.tensor(y)) ** 2).mean()
        scaler.scale(loss).backward()
        if clip:
            scaler.unscale_(opt)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch warns about clipping a non-finite norm
                lib.nn.utils.clip_grad_norm_([w], 0.5)
        scaler.step(opt)
        scaler.update()
        ws.append(w.detach().numpy().copy())
        scales.append(scaler.get_scale())
        trackers.append(scaler.state_dict()["_growth_tracker"])
    return ws, scales, trackers


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
@pytest.mark.parametrize("clip", [False, True])
def test_training_with_a_scaler_matches_torch(opt_name: str, clip: bool) -> None:
    w0 = np.random.default_rng(1).standard_normal((4, 1)).astype(np.float32)
    k_ws, k_scales, k_trackers = _run(kiln, w0, opt_name, clip)
    t_ws, t_scales, t_trackers = _run(torch, w0, opt_name, clip)
    assert k_scales == t_scales
    assert k_trackers == t_trackers
    for step, (kw, tw) in enumerate(zip(k_ws, t_ws)):
        np.testing.assert_allclose(kw, tw, rtol=1e-5, atol=1e-6, err_msg=f"after step {step}")
    # skipped steps leave the weights alone
    for step in BAD_STEPS:
        np.testing.assert_array_equal(k_ws[step], k_ws[step - 1])


def test_a_compiled_model_trains_with_a_scaler_as_eager() -> None:
    def train(compiled: bool) -> list[np.ndarray]:
        kiln.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        step_model = kiln.compile(model) if compiled else model
        opt = kiln.optim.SGD(model.parameters(), lr=0.1)
        scaler = GradScaler("cpu", init_scale=256.0, growth_interval=2)
        out = []
        for x, y in _batches():
            opt.zero_grad()
            with kiln.autocast("cpu"):
                loss = ((step_model(kiln.tensor(x)) - kiln.tensor(y)) ** 2).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            out.append(np.concatenate([p.detach().numpy().ravel() for p in model.parameters()] + [
                np.array([scaler.get_scale()])]))
        return out

    for eager, compiled in zip(train(False), train(True)):
        np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-6)


def test_a_disabled_scaler_passes_everything_through() -> None:
    w = kiln.ones(2, requires_grad=True)
    opt = kiln.optim.SGD([w], lr=0.5)
    scaler = GradScaler("cpu", enabled=False)
    loss = (w * 3).sum()
    assert scaler.scale(loss) is loss
    loss.backward()
    scaler.unscale_(opt)
    assert w.grad.tolist() == [3.0, 3.0]
    scaler.step(opt)
    scaler.update()
    assert w.tolist() == [-0.5, -0.5]
    assert scaler.get_scale() == 1.0 and scaler.state_dict() == {} and not scaler.is_enabled()


def test_a_cuda_scaler_without_a_gpu_warns_and_disables_like_torch() -> None:
    if kiln.cuda.is_available():
        pytest.skip("a GPU is available here")
    with pytest.warns(UserWarning, match="CUDA is not available. Disabling"):
        scaler = GradScaler()
    assert not scaler.is_enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not kiln.cuda.amp.GradScaler(enabled=False).is_enabled()


def _scaled_step_setup() -> tuple[kiln.Tensor, kiln.optim.Optimizer, GradScaler]:
    w = kiln.ones(2, requires_grad=True)
    opt = kiln.optim.SGD([w], lr=0.1)
    scaler = GradScaler("cpu")
    scaler.scale((w * 2).sum()).backward()
    return w, opt, scaler


def test_unscale_divides_the_gradients_once_per_iteration() -> None:
    w, opt, scaler = _scaled_step_setup()
    assert w.grad.tolist() == [2.0 ** 17] * 2
    scaler.unscale_(opt)
    assert w.grad.tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="already been called on this optimizer"):
        scaler.unscale_(opt)
    scaler.step(opt)  # does not unscale again
    np.testing.assert_allclose(w.detach().numpy(), [0.8, 0.8], rtol=1e-6)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) is being called after step"):
        scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    scaler.update()
    scaler.scale((w * 2).sum()).backward()
    scaler.unscale_(opt)  # a new iteration may unscale again


@pytest.mark.parametrize("call, exc, message", [
    (lambda s, opt: s.step(opt, closure=lambda: 0.0), RuntimeError, "Closure"),
    (lambda s, opt: GradScaler("cpu").update(), RuntimeError, "scale\\(loss\\)"),
    (lambda s, opt: GradScaler("cpu", growth_factor=0.5), ValueError, "growth_factor"),
    (lambda s, opt: GradScaler("cpu", backoff_factor=1.5), ValueError, "backoff_factor"),
    (lambda s, opt: GradScaler("cpu", growth_interval=0), ValueError, "growth_interval"),
    (lambda s, opt: GradScaler("mps"), ValueError, "device"),
    (lambda s, opt: s.scale("loss"), TypeError, "tensor"),
    (lambda s, opt: GradScaler("cpu").load_state_dict({}), RuntimeError, "empty"),
])
def test_misuse_raises_clear_errors(call, exc, message) -> None:
    _, opt, scaler = _scaled_step_setup()
    with pytest.raises(exc, match=message):
        call(scaler, opt)


def test_step_without_any_gradient_raises() -> None:
    w = kiln.ones(2, requires_grad=True)
    opt = kiln.optim.SGD([w], lr=0.1)
    scaler = GradScaler("cpu")
    scaler.scale((w * 2).sum())
    with pytest.raises(RuntimeError, match="No inf checks were recorded"):
        scaler.step(opt)


def test_float16_gradients_are_refused_like_torch() -> None:
    w = kiln.ones(2, dtype=kiln.float16, requires_grad=True)
    opt = kiln.optim.SGD([w], lr=0.1)
    scaler = GradScaler("cpu")
    scaler.scale((w * 2).sum()).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        scaler.unscale_(opt)


def test_state_dict_round_trips_and_loads_torchs() -> None:
    a = GradScaler("cpu", init_scale=8.0, growth_interval=5)
    _, opt, _ = _scaled_step_setup()
    a.scale(kiln.ones(()))
    a.update(new_scale=32.0)
    b = GradScaler("cpu")
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict() and b.get_scale() == 32.0
    t = torch.amp.GradScaler("cpu", init_scale=4.0, growth_factor=3.0, backoff_factor=0.125, growth_interval=7)
    t.scale(torch.ones(()))
    c = GradScaler("cpu")
    c.load_state_dict(t.state_dict())
    assert c.state_dict() == t.state_dict()
    assert (c.get_growth_factor(), c.get_backoff_factor(), c.get_growth_interval()) == (3.0, 0.125, 7)
