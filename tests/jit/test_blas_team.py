"""NumPy's OpenBLAS running its threaded calls on kiln's OpenMP team (cpu/blas_team.py).

Each case runs in a fresh process without torch, as a kiln user's does: the callback is
installed once per process, and only where no libgomp of unknown wait policy was loaded first.
OpenBLAS still splits the work, so every product must keep the bits it has on OpenBLAS's own
threads; the callback's counters show where the jobs ran.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from kiln.jit.backends import cpu
from kiln.jit.backends.cpu import blas, blas_team, toolchain

SCRIPT = r"""
import json, os, sys
import numpy as np
import kiln
from kiln.jit.backends.cpu import blas_team
from kiln.jit.backends.cpu import elementwise_groups
elementwise_groups.MIN_ELEMENTS = 1
double = kiln.compile(lambda x: (x * 2.0).relu(), backend="cpu")
double(kiln.randn(3, 3))
double(kiln.randn(3, 3))  # the first replay builds a kernel library that runs on teams (in the background)
kiln.jit.wait_for_builds()  # and loads it
rng = np.random.default_rng(0)
products = {}
for dtype in ("float32", "float64"):
    a, b = rng.standard_normal((600, 500)).astype(dtype), rng.standard_normal((500, 700)).astype(dtype)
    products[dtype] = (a @ b).view(f"u{a.itemsize}").sum(dtype=np.uint64).item()  # a checksum of the bits
result = {"shared": blas_team.shared(), "calls": blas_team.calls(), "products": products}
if len(sys.argv) > 1:  # a forked child goes back to OpenBLAS's own threads, and its products keep their bits
    a = rng.standard_normal((600, 500)).astype("float32")
    before = a @ a.T
    pid = os.fork()
    if pid == 0:
        os._exit(0 if not blas_team.shared() and np.array_equal(a @ a.T, before) else 3)
    result["child_status"] = os.waitpid(pid, 0)[1]
print(json.dumps(result))
"""


def _can_share() -> bool:
    return (cpu.available() and bool(toolchain.openmp_flags(toolchain.compiler_command()))
            and blas.threads_callback_setter() is not None)


pytestmark = pytest.mark.skipif(not _can_share(), reason="no OpenMP compiler, or NumPy's BLAS has no caller-managed "
                                                         "threading (OpenBLAS 0.3.27+)")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One kernel cache for the module's processes: the kernels compile once."""
    return tmp_path_factory.mktemp("kiln-cache")


def _run(cache_dir, *args: str, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    environ.update(KILN_CACHE_DIR=str(cache_dir), OPENBLAS_NUM_THREADS="2", **env)
    run = subprocess.run([sys.executable, "-c", SCRIPT, *args], env=environ, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_openblas_runs_its_jobs_on_the_team_with_the_bits_of_its_own_threads(cache_dir):
    shared = _run(cache_dir)
    own = _run(cache_dir, KILN_SHARED_BLAS_TEAM="0")
    assert shared["shared"] and not own["shared"]
    assert shared["calls"][0] >= 2 and shared["calls"][1] == 0  # both products ran as jobs on an OpenMP team
    assert own["calls"] == [0, 0]
    assert shared["products"] == own["products"]


def test_a_team_that_comes_up_short_runs_the_jobs_on_threads_of_their_own(cache_dir):
    """OpenBLAS's jobs wait for one another: with OpenMP allowed one thread, they still all run at once."""
    own = _run(cache_dir, KILN_SHARED_BLAS_TEAM="0")  # first: it records the OpenMP probe, which fails at one thread
    short = _run(cache_dir, OMP_THREAD_LIMIT="1")
    assert short["shared"] and short["calls"][0] == 0 and short["calls"][1] >= 2
    assert short["products"] == own["products"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_goes_back_to_openblas_threads(cache_dir):
    result = _run(cache_dir, "fork")
    assert result["shared"] and result["child_status"] == 0


DECIDE_LATER = r"""
import json
import kiln
from kiln.jit.backends.cpu import blas_team
expected = blas_team.share(wait=False)  # the callback library is not built yet: it builds in the background
started = "deciding in the background" in blas_team._state and "shared" not in blas_team._state
assert kiln.jit.wait_for_builds(120)
print(json.dumps({"expected": expected, "started": started, "shared": blas_team.shared(),
                  "calls": blas_team.calls()}))
"""


def test_a_plan_rendered_in_the_background_does_not_wait_for_the_team_decision(tmp_path):
    """`share(wait=False)` (a plan rendered while its code builds in the background) starts building the
    callback library in a worker thread and answers with the expected decision, which then holds."""
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    environ.update(KILN_CACHE_DIR=str(tmp_path), OPENBLAS_NUM_THREADS="2")  # (an empty cache)
    run = subprocess.run([sys.executable, "-c", DECIDE_LATER], env=environ, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["started"], "the decision was made on the calling thread, waiting for the compiler"
    assert result["expected"] is True and result["shared"] is True


def test_nothing_is_shared_before_a_team_library_loads_or_when_switched_off(monkeypatch):
    monkeypatch.setattr(blas_team, "_state", {})
    monkeypatch.setenv(blas_team.ENV, "0")
    assert not blas_team.shared()
    assert blas_team.share() is False and blas_team.calls() == (0, 0)
    assert np.array_equal(np.eye(3) @ np.eye(3), np.eye(3))


def test_libgomp_spins_only_where_openblas_shares_the_team(monkeypatch):
    """kiln's idle threads spin (as OpenBLAS's did) only where nothing else spins beside them."""
    monkeypatch.setattr(toolchain, "can_share_team", lambda: True)
    assert toolchain.openmp_environment() == ("GOMP_SPINCOUNT", toolchain.OPENMP_SPIN_COUNT)
    monkeypatch.setattr(toolchain, "can_share_team", lambda: False)
    assert toolchain.openmp_environment() == ("OMP_WAIT_POLICY", "passive")
    monkeypatch.undo()
    monkeypatch.setenv(blas_team.ENV, "0")
    assert not blas.can_share_team()
