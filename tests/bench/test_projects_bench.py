"""Smoke test of ``python -m kiln.bench projects``: every program runs on kiln (and torch); no timing assertions."""
from __future__ import annotations

import json

import pytest

import kiln
from kiln.bench.__main__ import main
from kiln.bench.project_programs import PROGRAMS


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.build.__name__ for p in PROGRAMS])
def test_every_program_runs_on_kiln(program):
    loop = program.build(kiln)
    loop(2)  # the same code runs on torch: kiln runs the script unchanged


def test_the_workload_reports_a_ratio_per_program(tmp_path, capsys):
    path = tmp_path / "projects.json"
    assert main(["projects", "--only", "VAE", "--repeat", "1", "--warmup", "0", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    rows = json.loads(path.read_text())["rows"]
    assert "VAE" in out and len(rows) == 1 and rows[0]["kiln_ms"] > 0
    has_torch = rows[0]["torch_ms"] is not None
    assert ("median kiln/torch" in out) == has_torch
