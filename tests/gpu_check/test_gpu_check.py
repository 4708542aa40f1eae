"""The prepared GPU check (python -m kiln.gpu_check): its no-GPU exit, a CPU rehearsal, its report."""
from __future__ import annotations

import json

import pytest

import kiln
from kiln.gpu_check.__main__ import NO_GPU_STATUS, main
from kiln.gpu_check.report import read_junit, verdict
from kiln.gpu_check.workloads import Result


@pytest.mark.skipif(kiln.cuda.is_available(), reason="this machine has a GPU: the check would run")
def test_without_a_gpu_it_stops_with_one_no_gpu_line(tmp_path, capsys):
    assert main([str(tmp_path)]) == NO_GPU_STATUS
    out = capsys.readouterr().out
    assert out.startswith("gpu_check: no GPU: ") and out.count("\n") == 1
    report = (tmp_path / "report.md").read_text()
    assert "**no GPU:" in report and "## Machine" in report and "## Workloads" not in report


def test_a_cpu_rehearsal_runs_every_workload(tmp_path):
    assert main([str(tmp_path), "--device", "cpu"]) == 0
    results = json.loads((tmp_path / "workloads.json").read_text())
    names = [r["name"] for r in results]
    assert len(names) == 4 and sum(n.startswith("LayerNorm+GELU") for n in names) == 2  # one block size when small
    for r in results:
        assert r["errors"] == {}, r
        assert r["ms"]["kiln.compile"] > 0
    assert (tmp_path / "workloads.log").read_text() == "no errors\n"
    report = (tmp_path / "report.md").read_text()
    assert "## Workloads (median ms per call)" in report and "MLP 784-256-256-10" in report


def test_junit_counts_failures_and_skips(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.cuda.a" name="ok"/>'
        '<testcase classname="tests.cuda.a" name="bad"><failure message="assert 1 == 2"/></testcase>'
        '<testcase classname="tests.cuda.b" name="gpu"><skipped message="needs CuPy and an NVIDIA GPU"/></testcase>'
        '<testcase classname="tests.devices.c" name="cpu"><skipped message="no-GPU behaviour: x"/></testcase>'
        '</testsuite></testsuites>')
    run = read_junit(junit, "ran")
    assert run.counts == {"tests": 4, "failures": 1, "errors": 0, "skipped": 2}
    assert run.failed == ["tests.cuda.a::bad: assert 1 == 2"]
    assert run.skipped == ["tests.cuda.b::gpu: needs CuPy and an NVIDIA GPU"]
    assert run.expected_skips == ["tests.devices.c::cpu: no-GPU behaviour: x"]  # not counted against a clean run
    assert read_junit(tmp_path / "missing.xml", "stopped after 240 s").status == "stopped after 240 s"


def test_verdicts_compare_with_each_targets_column():
    blocks = Result("2 transformer blocks B8 T128 D256 H4, fwd+bwd", "", {"kiln.compile": 2.0, "torch.compile": 2.5})
    assert verdict(blocks).startswith("met: 0.80x torch.compile")
    norm = Result("LayerNorm+GELU 16384x4096 float32", "", {"kiln.compile": 4.0, "device copy": 2.0})
    assert verdict(norm).startswith("MISSED: 2.00x device copy")
    mlp = Result("MLP 784-256-256-10 train step B=128, whole step compiled", "", {"kiln.compile": 1.0})
    assert verdict(mlp) == "not judged: no torch eager time"
