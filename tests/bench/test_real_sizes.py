"""Smoke tests of ``python -m kiln.bench real-sizes`` at its small size: every workload prints a row,
the torch twins get the kiln models' weights and give the same first-step loss, and the peak memory
is measured in fresh processes. No timing assertions."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.bench import WORKLOADS as BENCH_WORKLOADS
from kiln.bench import real_size_models as models
from kiln.bench import real_sizes

ROOT = Path(__file__).resolve().parents[2]  # this checkout's kiln, whatever else is on sys.path
HAS_TORCH = importlib.util.find_spec("torch") is not None
IDS = [w.name for w in models.WORKLOADS]


def _run(*argv: str) -> subprocess.CompletedProcess:
    """`python ARGV` in a fresh process running this checkout's kiln."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)


@pytest.mark.parametrize("workload", models.WORKLOADS, ids=IDS)
def test_every_workload_steps_on_kiln(workload):
    setup = models.build(kiln, workload, models.SMALL)
    call = models.make_call(kiln, setup, "kiln eager")
    first, second = float(call().sum()), float(call().sum())
    assert np.isfinite(first) and np.isfinite(second)
    assert (first != second) == setup.train  # training moves the weights; inference does not


@pytest.mark.parametrize("workload", models.WORKLOADS, ids=IDS)
def test_the_torch_twin_gives_the_same_first_step(workload):
    torch = pytest.importorskip("torch")
    setup = models.build(kiln, workload, models.SMALL)
    weights = {k: v.detach().numpy().copy() for k, v in setup.model.state_dict().items()}
    twin = models.build(torch, workload, models.SMALL, weights)
    assert twin.model.state_dict().keys() == weights.keys()
    for (name, mine), theirs in zip(twin.model.state_dict().items(), models.kiln_weights(workload, models.SMALL)
                                    .values()):  # the same seed builds the same kiln model again
        np.testing.assert_array_equal(mine.numpy(), theirs, err_msg=name)
    ours = models.make_call(kiln, setup, "kiln eager")().detach().numpy()
    theirs = models.make_call(torch, twin, "torch eager")().detach().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # about 25 s: kiln.compile and the whole step trace and compile each small model
def test_the_small_run_prints_a_row_per_workload(tmp_path):
    assert BENCH_WORKLOADS[real_sizes.NAME] is real_sizes
    path = tmp_path / "real.json"
    result = _run("-m", "kiln.bench", "real-sizes", "--small", "--repeat", "1", "--warmup", "0",
                  "--no-torch-compile", "--no-memory", "--warm-caches", "--json", str(path))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    out = result.stdout
    assert out.startswith("machine: "), out
    for workload in models.WORKLOADS:
        assert sum(line.startswith(workload.label(models.SMALL)) for line in out.splitlines()) == 2, out
    assert "kiln best / torch best" in out and "failed" not in out, out
    results = json.loads(path.read_text())["results"]
    assert list(results) == IDS
    for name, row in results.items():
        assert row["ms"]["kiln eager"]["median"] > 0 and row["ms"]["kiln.compile"]["median"] > 0, name
        assert ("kiln whole step" in row["ms"]) == (name != "resnet18-infer"), name
        assert ("torch eager" in row["ms"]) == HAS_TORCH, name
        assert (row["kiln_best_over_torch_best"] is not None) == HAS_TORCH, name
        assert row["first_calls_s"]["kiln.compile 1st"] > 0, name


def test_peak_memory_is_measured_in_fresh_processes():
    gpt = next(w for w in models.WORKLOADS if w.name == "gpt-train")
    peaks = real_sizes._peaks([gpt], "small", 1, torch=HAS_TORCH)["gpt-train"]
    assert set(peaks) == {c for c in real_sizes.MEMORY_COLUMNS if HAS_TORCH or not c.startswith("torch")}
    assert all(first > 0 and steady > 0 and seconds > 0 for first, steady, seconds in peaks.values()), peaks
