"""Smoke tests of the `targets` workload (``python -m kiln.bench --peers``): it runs, prints
the machine line, each case's columns, target and verdict; no timing assertions."""
from __future__ import annotations

import json

from kiln.bench import targets
from kiln.bench.__main__ import main

TINY = ["--repeat", "1", "--warmup", "0", "--no-torch-compile", "--no-process"]


def test_peers_flag_runs_the_targets_workload(tmp_path, capsys):
    path = tmp_path / "targets.json"
    assert main(["--peers", *TINY, "--cases", "MLP inference", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("machine: ") and "versions: python" in out and "threads: NumPy BLAS" in out
    assert "MLP inference B=1" in out and "<= 0.5x jax.jit" in out
    assert "LayerNorm" not in out  # --cases picked one case
    data = json.loads(path.read_text())
    row = data["results"]["MLP inference B=1"]
    assert row["kiln.compile"]["median"] > 0 and row["kiln eager"]["median"] > 0


def test_every_case_names_a_target_column_that_exists():
    for case in targets.CASES:
        assert case.targets and all(t.peer in targets.COLUMNS and t.limit > 0 for t in case.targets)


def test_verdicts():
    assert targets._verdict(0.5, 1.0) == "met"
    assert targets._verdict(1.5, 1.0) == "MISSED"
    assert targets._verdict(None, 1.0) == "-"
