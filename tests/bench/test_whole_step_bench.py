"""Smoke tests of the `whole-step` bench workload: its loops run, the whole step really is one
plan, and the report names every target. No timing assertions."""
from __future__ import annotations

import json

import numpy as np
import pytest

from kiln.bench import WORKLOADS, whole_step
from kiln.bench.__main__ import main


def test_the_whole_step_loop_replays_one_plan():
    rng = np.random.default_rng(0)
    batch = (rng.standard_normal((2, 784)).astype(np.float32), rng.integers(0, 10, 2))
    loop, _ = whole_step._kiln_loop("mlp", batch, "whole step", adamw=False)
    loop(4)
    stats = loop.step.stats
    assert stats.fallbacks == 0 and stats.hits == 2 and stats.traces == 2


def test_the_jax_step_is_the_same_sgd_step():
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(0)
    batch = (rng.standard_normal((3, 784)).astype(np.float32), rng.integers(0, 10, 3))
    loop, model = whole_step._kiln_loop("mlp", batch, "kiln eager", adamw=False)
    jax_loop = whole_step._jax_loop(jax, model, batch)  # built from the weights before the steps
    loop(3)
    jax_loop(3)
    params, _ = jax_loop.state
    for (w, b), layer in zip(params, [m for m in model if hasattr(m, "weight")]):
        np.testing.assert_allclose(np.asarray(w), layer.weight.detach().numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(np.asarray(b), layer.bias.detach().numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_the_workload_runs_and_reports_every_target(tmp_path, capsys):
    assert "whole-step" in WORKLOADS
    path = tmp_path / "whole.json"
    assert main(["whole-step", "--repeat", "1", "--warmup", "0", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "MLP SGD B=16" in out and "GPT AdamW" in out
    data = json.loads(path.read_text())
    assert len(data["results"]["targets"]) == len(whole_step.TARGETS)
