"""Smoke test of ``python -m kiln.bench dynamic`` at its small size: every case prints, the compiled
generation and cached decoding trace a fixed number of times and generate eager's tokens (torch's too,
when installed). No timing assertions."""
from __future__ import annotations

import argparse
import importlib.util

import kiln
from kiln.bench import dynamic_shapes

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _args(**overrides) -> argparse.Namespace:
    args = dict(repeat=1, warmup=0, passes=1, small=True, warm_caches=True, no_torch=not HAS_TORCH, json=None)
    return argparse.Namespace(**{**args, **overrides})


def test_small_generation_traces_twice_and_every_column_agrees():
    torch = dynamic_shapes.import_torch() if HAS_TORCH else None
    result = dynamic_shapes.generation_case(kiln, torch, _args())
    assert result["traces"] == 2
    assert result["same tokens"]
    assert ("torch eager" in result) == HAS_TORCH


def test_small_cached_decoding_traces_three_times_and_every_column_agrees():
    """The prompt (an empty cache), the first token (a static plan), then one symbolic plan."""
    torch = dynamic_shapes.import_torch() if HAS_TORCH else None
    result = dynamic_shapes.decode_case(kiln, torch, _args())
    assert result["traces"] == 3
    assert result["same tokens"]


def test_the_workload_prints_all_four_cases(capsys, tmp_path):
    assert dynamic_shapes.run(_args(json=str(tmp_path / "dynamic.json"))) == 0
    text = capsys.readouterr().out
    for heading in ("one data-dependent branch", "one call at each batch", "Greedy generation", "KV-cache decoding"):
        assert heading in text
    assert (tmp_path / "dynamic.json").exists()
