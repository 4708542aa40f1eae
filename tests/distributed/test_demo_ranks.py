"""`python -m kiln demo --ranks N`: the demo relaunches itself on N ranks with DistributedDataParallel."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_demo_on_two_ranks(mpi_launch, tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "kiln", "demo", "--ranks", "2", "--epochs", "1", "--eager",
                           "--out", str(out)], env=_env(), cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.count("kiln demo: a small CNN") == 1, "only rank 0 prints"
    assert "DistributedDataParallel on 2 ranks" in proc.stdout and "batch 64 per rank" in proc.stdout
    assert "x 12 steps" in proc.stdout, "each rank steps through its half of the 1438 training images"
    assert proc.stdout.count("epoch  1/1") == 1
    assert (out / "weights.safetensors").exists()


def test_one_rank_says_it_runs_in_one_process(monkeypatch, capsys, tmp_path):
    from kiln import cli

    seen = {}
    monkeypatch.setattr("kiln.demo.run_demo", lambda config: seen.setdefault("ranks", config.ranks))
    monkeypatch.setattr(sys, "argv", ["kiln", "demo", "--ranks", "1"])
    assert cli.main(["demo", "--ranks", "1", "--out", str(tmp_path)]) == 0
    assert seen["ranks"] == 1
    assert "--ranks 1 trains in this one process" in capsys.readouterr().out


def test_ranks_without_mpi4py_names_the_extra(monkeypatch, capsys, tmp_path):
    import builtins

    from kiln import cli

    real_import = builtins.__import__

    def no_mpi4py(name, *args, **kwargs):
        if name == "mpi4py" or name.startswith("mpi4py."):
            raise ImportError("No module named 'mpi4py'")
        return real_import(name, *args, **kwargs)

    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(builtins, "__import__", no_mpi4py)
    assert cli.main(["demo", "--ranks", "2", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "--ranks 2 needs MPI" in err and 'pip install "kiln[distributed]"' in err


@pytest.mark.parametrize("value", ["0", "two"])
def test_bad_ranks_is_a_usage_error(value, capsys):
    from kiln import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["demo", "--ranks", value])
    assert exc.value.code == 2
    assert "expected a positive integer" in capsys.readouterr().err


def test_a_rank_count_unlike_the_launchers_is_a_demo_error(monkeypatch):
    """A rank started by an MPI launcher for another world size says so (a DemoError, not a NameError)."""
    from kiln.demo import DemoConfig, DemoError
    from kiln.demo.train import join_world

    monkeypatch.setenv("PMI_SIZE", "3")
    with pytest.raises(DemoError, match=r"ranks=2 but this process was started as one of 3"):
        join_world(DemoConfig(ranks=2))
