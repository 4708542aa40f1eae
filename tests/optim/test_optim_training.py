"""End to end: kiln autograd plus kiln.optim fit a tiny linear regression."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.optim

TRUE_W = np.array([[2.0], [-3.0], [0.5]])
TRUE_B = 0.7


@pytest.mark.parametrize("make, steps", [
    (lambda ps: kiln.optim.SGD(ps, lr=0.1, momentum=0.9), 200),
    (lambda ps: kiln.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True), 200),
    (lambda ps: kiln.optim.Adam(ps, lr=0.1), 300),
    (lambda ps: kiln.optim.AdamW(ps, lr=0.1, weight_decay=1e-4), 300),
    (lambda ps: kiln.optim.RMSprop(ps, lr=0.02, momentum=0.5), 300),
], ids=["SGD-momentum", "SGD-nesterov", "Adam", "AdamW", "RMSprop"])
def test_linear_regression_converges(make, steps: int) -> None:
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((64, 3)).astype(np.float32)
    x = kiln.tensor(x_np)
    y = kiln.tensor((x_np @ TRUE_W + TRUE_B).astype(np.float32))
    w = kiln.zeros(3, 1, requires_grad=True)
    b = kiln.zeros(1, requires_grad=True)
    opt = make([w, b])
    sched = kiln.optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.5)

    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((x @ w + b - y) ** 2).mean()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())

    assert losses[-1] < 1e-6 * losses[0]
    np.testing.assert_allclose(w.numpy(force=True), TRUE_W, atol=1e-3)
    np.testing.assert_allclose(b.numpy(force=True), [TRUE_B], atol=1e-3)
