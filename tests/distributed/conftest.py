"""Fixtures: `launch` starts a script on several ranks through `python -m kiln.distributed.run`,
skipping where MPI is missing; `world_of_one` gives an initialized one-process group."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def require_mpi() -> None:
    """Skip the calling test unless mpi4py imports and an mpiexec can be found."""
    pytest.importorskip("mpi4py")
    from kiln.distributed.run import find_mpiexec

    if find_mpiexec() is None:
        pytest.skip("mpiexec not found (pip install mpich)")


def launch(nproc: int, script: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``scripts/<script>`` on `nproc` ranks; return the finished process (stdout and stderr merged)."""
    require_mpi()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("KILN_DIST_TIMEOUT", None)
    for name in ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "kiln.distributed.run", "-n", str(nproc), str(SCRIPTS / script),
                           *args], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


@pytest.fixture
def mpi_launch():
    """The `launch` function (skips the test where mpi4py or mpiexec is missing)."""
    require_mpi()
    return launch


@pytest.fixture
def world_of_one(monkeypatch):
    """A process group of one rank, destroyed after the test."""
    import kiln.distributed as dist

    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE"):
        monkeypatch.delenv(name, raising=False)
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group()
    yield dist
    dist.destroy_process_group()
