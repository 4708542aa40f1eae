"""Smoke tests of ``python -m kiln.bench``: it runs and reports; no timing assertions."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from kiln.bench import WORKLOADS
from kiln.bench import eager_overhead
from kiln.bench.__main__ import main
from kiln.bench.report import Table, fmt, fmt_ratio
from kiln.bench.threads import numpy_blas_threads
from kiln.bench.timing import measure, repeat_calls

TINY = ["--repeat", "2", "--warmup", "1", "--number", "3"]

try:
    import torch  # noqa: F401
    HAS_TORCH = True
except ImportError:
    HAS_TORCH = False


def test_eager_overhead_runs_and_writes_json(tmp_path, capsys):
    path = tmp_path / "out" / "eager.json"
    assert main(["eager-overhead", *TINY, "--json", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "kiln/torch" in printed and "MLP" in printed
    data = json.loads(path.read_text())
    assert data["workload"] == "eager-overhead"
    assert len(data["results"]) == len(eager_overhead.CASES)
    for row in data["results"]:
        assert row["kiln"]["median"] > 0 and row["kiln"]["samples"] == 2
        assert (row["torch"] is not None) == HAS_TORCH
        if HAS_TORCH:
            assert row["ratio_kiln_over_torch"] > 0
    assert data["env"]["numpy_blas_threads"] >= 1
    if HAS_TORCH:
        assert data["env"]["torch_threads"] == data["env"]["numpy_blas_threads"]


def test_no_torch_skips_the_column(capsys):
    assert main(["eager-overhead", *TINY, "--no-torch"]) == 0
    assert "torch: skipped" in capsys.readouterr().out


def test_unwritable_json_path_fails_cleanly(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["eager-overhead", *TINY, "--no-torch", "--json", str(blocker / "x.json")]) == 1
    assert "cannot write" in capsys.readouterr().err


def test_no_arguments_lists_workloads(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in WORKLOADS)


def test_module_entry_point_lists_workloads():
    result = subprocess.run([sys.executable, "-m", "kiln.bench"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "eager-overhead" in result.stdout


def test_bad_repeat_is_rejected():
    with pytest.raises(SystemExit):
        main(["eager-overhead", "--repeat", "0", "--no-torch"])


def test_functional_fallback_mlp_step_runs():
    """The kiln.functional + NumPy SGD step (used when kiln.nn/optim are missing) keeps working."""
    eager_overhead._kiln_mlp_step_functional()(2)


def test_measure_returns_one_sample_per_repeat():
    calls = []
    timing = measure(repeat_calls(lambda: calls.append(1)), number=4, repeat=3, warmup=2)
    assert len(timing.samples) == 3 and len(calls) == 4 * (3 + 2)
    assert timing.min <= timing.median <= timing.max and timing.iqr >= 0
    assert set(timing.as_dict(1e-6)) >= {"median", "min", "max", "iqr", "samples"}
    with pytest.raises(ValueError, match="repeat"):
        measure(repeat_calls(lambda: None), repeat=0)


def test_measure_picks_enough_calls_for_a_sample_of_the_minimum_length():
    """number=None: a sample of a ~1 ms call lasts at least min_sample_s, not one call."""
    import time

    timing = measure(repeat_calls(lambda: time.sleep(0.001)), number=None, repeat=2, warmup=1, min_sample_s=0.02)
    # a sleep lasts at least 1 ms, so at most 20 calls make 20 ms; a loaded machine (other test
    # workers) stretches the sleeps, so the lower bound only says "many calls, not one"
    assert 5 <= timing.number <= 20
    fast = measure(repeat_calls(lambda: None), number=None, repeat=1, warmup=0, min_sample_s=0.001)
    assert fast.number > 100


def test_measure_does_not_calibrate_on_the_first_call_after_the_warmup():
    """The call right after the warmup (and the builds it waits for) may load libraries; calibrated on, it would
    make every sample one call long."""
    import time

    calls = []

    def call() -> None:
        calls.append(1)
        if len(calls) == 2:  # the first call after one warmup call: 50 ms
            time.sleep(0.05)

    timing = measure(repeat_calls(call), number=None, repeat=1, warmup=1, min_sample_s=0.001)
    assert timing.number > 10


def test_table_and_number_formatting():
    table = Table(["case", "kiln", "ratio"])
    table.add_row(["add", fmt(3.14159), fmt_ratio(1.5)])
    table.add_row(["mlp", fmt(None), fmt_ratio(None)])
    lines = table.render().splitlines()
    assert lines[0].split() == ["case", "kiln", "ratio"] and "3.14" in lines[2] and "1.50x" in lines[2]
    assert fmt(1234.5) == "1234" or fmt(1234.5) == "1235"
    assert fmt(0.012345) == "0.0123" and fmt(float("nan")) == "-"
    with pytest.raises(ValueError, match="cells"):
        table.add_row(["too", "few"])


def test_blas_thread_count_is_positive():
    n = numpy_blas_threads()
    assert isinstance(n, int) and n >= 1 and not math.isnan(n)


def test_noisy_timings_are_marked():
    from kiln.bench.report import fmt_timing, is_noisy
    from kiln.bench.timing import Timing

    steady = Timing((1.0e-3, 1.01e-3, 0.99e-3, 1.0e-3), number=1)
    jumpy = Timing((1e-3, 1e-3, 9e-3, 9e-3), number=1)
    assert not is_noisy(steady) and fmt_timing(steady, 1e-3) == "1.00"
    assert is_noisy(jumpy) and fmt_timing(jumpy, 1e-3).endswith("*")
    assert fmt_timing(None, 1e-3) == "-"
