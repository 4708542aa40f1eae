"""Helpers for the whole-step tests: models, optimizers and a training loop run eagerly or compiled.

A run builds its model and optimizer from a fixed seed, so an eager run and a compiled run
start from the same weights and draw the same data and dropout masks; the eager run is the
oracle the compiled one must match.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import kiln
import kiln.nn.functional as F
from kiln import nn

RTOL = {"float64": 1e-6, "float32": 1e-4}  # losses, relative (the acceptance bar)
PAIRS = [("interpret", "float64"), ("cpu", "float32")]  # each backend in one dtype (both run in CI)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def mlp_bn_dropout() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 4))


def lenet() -> nn.Module:
    return kiln.models.lenet_5(4)


def gpt() -> nn.Module:
    return kiln.models.gpt(vocab=12, n_layer=1, n_head=2, d_model=16, block_size=6)


MODELS: dict[str, Callable[[], nn.Module]] = {"mlp": mlp, "mlp_bn_dropout": mlp_bn_dropout, "lenet": lenet,
                                              "gpt": gpt}


def batch(model: str, rng: np.random.Generator, dtype: str, micro: int = 0) -> tuple:
    """Inputs and targets for one step (`micro` > 0: that many stacked micro-batches)."""
    lead = (micro,) if micro else ()
    if model == "gpt":  # a learnable rule (next token = token + 1): random targets leave a chance-level plateau
        tokens = rng.integers(0, 12, lead + (2, 6))  # where adaptive optimizers amplify rounding noise chaotically
        return kiln.tensor(tokens), kiln.tensor((tokens + 1) % 12)
    if model == "lenet":
        x = rng.standard_normal(lead + (2, 1, 32, 32))
        return kiln.tensor(x, dtype=dtype), kiln.tensor(rng.integers(0, 4, lead + (2,)))
    return kiln.tensor(rng.standard_normal(lead + (5, 8)), dtype=dtype), kiln.tensor(rng.integers(0, 4, lead + (5,)))


def loss_of(model: nn.Module, x: kiln.Tensor, y: kiln.Tensor) -> kiln.Tensor:
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


OPTIMIZERS: dict[str, Callable[[Any], kiln.optim.Optimizer]] = {
    "sgd_nesterov_wd": lambda ps: kiln.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2),
    "sgd_dampening": lambda ps: kiln.optim.SGD(ps, lr=0.05, momentum=0.8, dampening=0.3, maximize=False),
    "adamw_amsgrad": lambda ps: kiln.optim.AdamW(ps, lr=1e-2, amsgrad=True, weight_decay=0.05),
    "adam_l2": lambda ps: kiln.optim.Adam(ps, lr=1e-2, weight_decay=0.01),
    "rmsprop": lambda ps: kiln.optim.RMSprop(ps, lr=1e-2, momentum=0.5, centered=True, weight_decay=1e-3),
    "rmsprop_plain": lambda ps: kiln.optim.RMSprop(ps, lr=1e-3),
}


@dataclass
class Run:
    """What a training run produced: the losses and the final model and optimizer."""

    losses: list[float]
    model: nn.Module
    optimizer: kiln.optim.Optimizer
    compiled: Any = None
    extra: dict = field(default_factory=dict)


def train(model: str, optimizer: str, *, steps: int, dtype: str, backend: str | None, clip: str | None = None,
          micro: int = 0, cosine: bool = False, seed: int = 0) -> Run:
    """`steps` training steps, each one call of `train_step`; compiled when `backend` is given."""
    kiln.manual_seed(seed)
    m = MODELS[model]().to(dtype)
    opt = OPTIMIZERS[optimizer](m.parameters())
    if model == "gpt" and optimizer.startswith("rmsprop"):  # centered RMSprop at 1e-2 makes the GPT's loss climb
        for group in opt.param_groups:
            group["lr"] = 1e-3
    schedule = kiln.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps) if cosine else None

    def train_step(x: kiln.Tensor, y: kiln.Tensor) -> kiln.Tensor:
        opt.zero_grad()
        if micro:
            loss = None
            for i in range(micro):
                part = loss_of(m, x[i], y[i]) / micro
                part.backward()
                loss = part.detach() if loss is None else loss + part.detach()
        else:
            loss = loss_of(m, x, y)
            loss.backward()
        if clip == "norm":
            kiln.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
        elif clip == "value":
            kiln.nn.utils.clip_grad_value_(m.parameters(), 0.02)
        opt.step()
        return loss

    step = kiln.compile(train_step, backend=backend) if backend else train_step
    rng = np.random.default_rng(seed + 1)
    kiln.manual_seed(seed + 2)  # dropout masks: the same stream eager and compiled
    losses = []
    for _ in range(steps):
        losses.append(float(step(*batch(model, rng, dtype, micro))))
        if schedule is not None:
            schedule.step()
    return Run(losses, m, opt, step if backend else None)


def noise_only(name: str, size: int) -> np.ndarray | None:
    """Elements of parameter `name` whose gradient is zero in exact arithmetic, else None.

    The key third of a GPT attention's fused q/k/v bias adds q.b_k to every score of a row,
    which softmax ignores: its gradient is rounding noise, which adaptive optimizers (Adam,
    RMSprop) scale up to full steps. Two correct implementations that round differently
    (compiled float32 softmax uses kiln's own exp, within a few ulp of NumPy's) then move
    those elements differently, with no effect on the loss.
    """
    if name.endswith("attn.c_attn.bias") and size % 3 == 0:
        return np.arange(size // 3, 2 * size // 3)
    return None


def _allclose_but_noise(a: np.ndarray, b: np.ndarray, noise: np.ndarray | None, **kw: Any) -> None:
    if noise is not None and a.ndim == 1:
        keep = np.ones(a.shape, bool)
        keep[noise] = False
        a, b = a[keep], b[keep]
    if b.dtype == np.float32 and b.size:
        # float32 state after many steps: compiled float32 transcendentals are within a few ulp of NumPy's,
        # and those differences grow step by step; small elements of a tensor are judged on its scale
        kw = dict(kw, atol=max(kw["atol"], kw["rtol"] * float(np.max(np.abs(b)))))
    np.testing.assert_allclose(a, b, **kw)


def assert_same_run(got: Run, want: Run, dtype: str) -> None:
    """Losses within the acceptance bar; parameters, buffers and optimizer state close at the end
    (except elements whose gradient is only rounding noise: noise_only)."""
    rtol = RTOL[dtype]
    np.testing.assert_allclose(got.losses, want.losses, rtol=rtol, atol=0)
    atol = 1e-9 if dtype == "float64" else 1e-5
    for (name, a), (_, b) in zip(got.model.state_dict().items(), want.model.state_dict().items()):
        _allclose_but_noise(a.numpy(), b.numpy(), noise_only(name, a.numpy().size), rtol=rtol, atol=atol, err_msg=name)
    names = [name for name, _ in got.model.named_parameters()]
    assert_same_optimizer_state(got.optimizer, want.optimizer, rtol, atol, names)


def assert_same_optimizer_state(got: kiln.optim.Optimizer, want: kiln.optim.Optimizer, rtol: float,
                                atol: float, names: list[str] | None = None) -> None:
    gs, ws = got.state_dict(), want.state_dict()
    assert [{k: v for k, v in g.items() if k != "params"} for g in gs["param_groups"]] == \
        [{k: v for k, v in g.items() if k != "params"} for g in ws["param_groups"]]
    assert sorted(gs["state"]) == sorted(ws["state"])
    for index, entries in ws["state"].items():
        assert sorted(gs["state"][index]) == sorted(entries), f"param {index}"
        for key, value in entries.items():
            a, b = gs["state"][index][key], value
            assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape), f"state[{index}][{key!r}]"
            noise = noise_only(names[index], a.numpy().size) if names and isinstance(index, int) \
                and index < len(names) else None
            _allclose_but_noise(a.numpy(), b.numpy(), noise, rtol=rtol, atol=atol, err_msg=f"state[{index}][{key!r}]")
