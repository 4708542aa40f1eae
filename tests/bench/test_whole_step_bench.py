"""Smoke tests of the `whole-step` bench workload: its loops run, the whole step really is one
plan, and the report names every target. No timing assertions."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kiln.bench import WORKLOADS, whole_step


def test_the_whole_step_loop_replays_one_plan():
    rng = np.random.default_rng(0)
    batch = (rng.standard_normal((2, 784)).astype(np.float32), rng.integers(0, 10, 2))
    loop, _ = whole_step._kiln_loop("mlp", batch, "whole step", adamw=False)
    loop(4)
    stats = loop.step.stats
    assert stats.fallbacks == 0 and stats.hits == 2 and stats.traces == 2


_JAX_CHECK = """
import numpy as np, jax
from kiln.bench import whole_step
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
print("same")
"""


def _run(*argv: str) -> subprocess.CompletedProcess:
    """In a fresh process: JAX starts threads, and a later os.fork() in this one would warn."""
    root = Path(__file__).resolve().parents[2]  # this checkout's kiln, whatever else is on sys.path
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=600, cwd=root, env=env)


def test_the_jax_step_is_the_same_sgd_step():
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")
    result = _run("-c", _JAX_CHECK)
    assert result.returncode == 0 and "same" in result.stdout, result.stderr[-2000:]


@pytest.mark.slow
def test_the_workload_runs_and_reports_every_target(tmp_path):
    assert "whole-step" in WORKLOADS
    path = tmp_path / "whole.json"
    result = _run("-m", "kiln.bench", "whole-step", "--repeat", "1", "--warmup", "0", "--json", str(path))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "MLP SGD B=16" in result.stdout and "GPT AdamW" in result.stdout
    simd = r"(AVX-512|AVX2|AVX|SSE4\.2|SSE2|SVE2|SVE|NEON|scalar)"
    assert re.search(rf"^machine: .+: {simd}; kernels built for ", result.stdout, re.MULTILINE), result.stdout
    data = json.loads(path.read_text())
    assert len(data["results"]["targets"]) == len(whole_step.TARGETS)
