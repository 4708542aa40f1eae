"""Smoke tests of the `targets` workload (``python -m kiln.bench --peers``): it runs, prints
the machine line, each case's columns, target and verdict; no timing assertions."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import kiln
from kiln.bench import op_cases, targets
from kiln.bench.__main__ import main
from kiln.bench.target_cases import Peers

TINY = ["--repeat", "1", "--warmup", "0", "--no-torch-compile", "--no-process"]
SIMD = r"(AVX-512|AVX2|AVX|SSE4\.2|SSE2|SVE2|SVE|NEON|scalar)"
MACHINE_LINE = rf"^machine: .+: {SIMD}; kernels built for ({SIMD}|unknown) \(-march=\S+\); \d+ CPUs available"
NEW_CASES = ["softmax 4096x1024", "GELU (erf) 4096x1024", "cross-entropy fwd+bwd 4096x1024"]


def test_peers_flag_runs_the_targets_workload(tmp_path, capsys):
    path = tmp_path / "targets.json"
    assert main(["--peers", *TINY, "--cases", "MLP inference", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("machine: ") and "versions: python" in out and "threads: NumPy BLAS" in out
    assert re.search(MACHINE_LINE, out, re.MULTILINE), out  # the CPU, its SIMD level and the kernels'
    assert "MLP inference B=1" in out and "<= 0.5x jax.jit" in out
    assert "LayerNorm" not in out  # --cases picked one case
    data = json.loads(path.read_text())
    row = data["results"]["MLP inference B=1"]
    assert row["kiln.compile"]["median"] > 0 and row["kiln eager"]["median"] > 0


def test_every_case_names_a_target_column_that_exists():
    for case in targets.CASES:
        assert case.targets and all(t.peer in targets.COLUMNS and t.limit > 0 for t in case.targets)


def test_the_single_op_cases_are_held_to_jax_and_to_kiln_eager():
    by_name = {case.name: case for case in targets.CASES}
    for name in NEW_CASES:
        assert {(t.peer, t.limit) for t in by_name[name].targets} == {("jax.jit", 1.0), ("kiln eager", 1.0)}


@pytest.mark.parametrize("name", NEW_CASES)
def test_each_single_op_case_builds_and_runs_its_kiln_loops(name):
    case = next(c for c in targets.CASES if c.name == name)
    loops = case.build(Peers(torch=None, jax=None, torch_compile=False))
    assert set(loops) == {"kiln eager", "kiln.compile"}
    for loop in loops.values():
        loop(1)


@pytest.mark.parametrize("fn", [op_cases.kiln_softmax, op_cases.kiln_gelu], ids=["softmax", "gelu"])
def test_compiled_single_ops_match_eager(fn):
    x = kiln.tensor(op_cases.inputs()[0])
    np.testing.assert_allclose(kiln.compile(fn)(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-6)


def test_compiled_cross_entropy_loss_and_gradient_match_eager():
    x_np, t_np = op_cases.inputs()
    assert x_np.shape == op_cases.SHAPE and t_np.shape == op_cases.SHAPE[:1]
    results = []
    for loss_fn in (op_cases.kiln_cross_entropy, kiln.compile(op_cases.kiln_cross_entropy)):
        x = kiln.tensor(x_np, requires_grad=True)
        loss = loss_fn(x, kiln.tensor(t_np))
        loss.backward()
        results.append((loss.item(), x.grad.numpy()))
    (eager_loss, eager_grad), (compiled_loss, compiled_grad) = results
    np.testing.assert_allclose(compiled_loss, eager_loss, rtol=1e-5)
    np.testing.assert_allclose(compiled_grad, eager_grad, rtol=1e-5, atol=1e-9)


def test_the_kiln_eager_target_uses_the_kiln_sides_column(tmp_path, capsys):
    """A target whose peer is a kiln column gets its ratio from the child process's timings."""
    path = tmp_path / "softmax.json"
    assert main(["targets", *TINY, "--cases", "softmax", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "softmax 4096x1024" in out and "<= 1x kiln eager" in out and "GELU" not in out
    row = json.loads(path.read_text())["results"]["softmax 4096x1024"]
    assert row["ratio vs kiln eager"] == pytest.approx(row["kiln.compile"]["median"] / row["kiln eager"]["median"])


def test_verdicts():
    assert targets._verdict(0.5, 1.0) == "met"
    assert targets._verdict(1.5, 1.0) == "MISSED"
    assert targets._verdict(None, 1.0) == "-"


def test_the_kiln_side_times_kiln_columns_in_a_process_without_torch_or_jax(tmp_path):
    """`--side kiln` (the child an ordinary run starts) imports neither peer and writes only kiln's columns."""
    import subprocess
    import sys

    path = tmp_path / "kiln.json"
    code = ("import sys; from kiln.bench.__main__ import main; "
            f"rc = main(['targets', *{TINY!r}, '--cases', 'MLP inference', '--side', 'kiln', "
            f"'--timings-json', {str(path)!r}]); "
            "print('peers loaded:', sorted(m for m in ('torch', 'jax') if m in sys.modules)); sys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "peers loaded: []" in result.stdout
    data = json.loads(path.read_text())
    assert set(data) == {"MLP inference B=1"} and set(data["MLP inference B=1"]) == {"kiln eager", "kiln.compile"}
    assert all(t["samples"] and t["number"] >= 1 for t in data["MLP inference B=1"].values())


def test_a_failing_kiln_side_is_reported_with_its_output():
    import pytest

    from kiln.bench import isolate

    with pytest.raises(RuntimeError, match="the kiln side of `targets` failed"):
        isolate.kiln_side("targets", ["--repeat", "not-a-number"])


def test_timings_survive_the_json_between_the_processes():
    from kiln.bench import isolate
    from kiln.bench.timing import Timing

    timings = {"case": {"kiln.compile": Timing((1e-3, 2e-3, 1.5e-3), 7)}}
    back = isolate.timings_from_json(json.loads(json.dumps(isolate.timings_to_json(timings))))
    assert back == timings and back["case"]["kiln.compile"].median == 1.5e-3


def test_same_process_times_kiln_beside_its_peers(tmp_path, capsys):
    path = tmp_path / "same.json"
    assert main(["targets", *TINY, "--cases", "MLP inference", "--same-process", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "separate process" not in out and "MLP inference B=1" in out
    row = json.loads(path.read_text())["results"]["MLP inference B=1"]
    assert row["kiln.compile"]["median"] > 0 and row["kiln eager"]["median"] > 0
