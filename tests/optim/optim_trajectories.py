"""Helpers for optimizer tests: the same random params and gradients, fed to kiln or PyTorch."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

import kiln
import kiln.optim

SHAPES = [(5, 4), (4,), (3, 2, 2), ()]  # a 0-d param too: temporaries must stay arrays
SKIPPED = {(1, 3), (2, 7)}  # (param index, step) pairs whose grad is None: the optimizer must skip them


def initial_params(dtype: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for shape in SHAPES]


def gradients(dtype: str, steps: int, seed: int = 1) -> list[list[np.ndarray | None]]:
    """gradients(...)[step][i]: the gradient of param i at that step (None for SKIPPED)."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(steps):
        grads = [rng.standard_normal(shape).astype(dtype) for shape in SHAPES]
        out.append([None if (i, step) in SKIPPED else g for i, g in enumerate(grads)])
    return out


def kiln_params(arrays: list[np.ndarray]) -> list[kiln.Tensor]:
    return [kiln.tensor(a, requires_grad=True) for a in arrays]


def run_kiln(opt: kiln.optim.Optimizer, params: list[kiln.Tensor], grads: list[list[np.ndarray | None]],
             after_step: Callable[[], Any] | None = None) -> None:
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = None if g is None else kiln.tensor(g)
        opt.step()
        if after_step is not None:
            after_step()


def run_torch(opt: Any, params: list[Any], grads: list[list[np.ndarray | None]],
              after_step: Callable[[], Any] | None = None) -> None:
    import torch

    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = None if g is None else torch.from_numpy(g.copy())
        opt.step()
        if after_step is not None:
            after_step()


def as_numpy(value: Any) -> np.ndarray:
    """A kiln or torch tensor (or anything array-like) as a NumPy array."""
    if isinstance(value, kiln.Tensor):
        return value.detach().numpy()
    if hasattr(value, "detach"):
        return value.detach().numpy()
    return np.asarray(value)


def assert_state_matches(kiln_opt: kiln.optim.Optimizer, torch_opt: Any, rtol: float, atol: float) -> None:
    """Same per-parameter state keys and values, indexed as in state_dict()."""
    ks, ts = kiln_opt.state_dict()["state"], torch_opt.state_dict()["state"]
    assert sorted(ks) == sorted(ts)
    for index, torch_state in ts.items():
        assert sorted(ks[index]) == sorted(torch_state), f"param {index}"
        for key, value in torch_state.items():
            np.testing.assert_allclose(as_numpy(ks[index][key]), as_numpy(value), rtol=rtol, atol=atol,
                                       err_msg=f"state[{index}][{key!r}]")
