"""Shared test setup: make tests/ helper modules importable and reset kiln's global state."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The suite runs one process per CPU (pytest -n): OpenMP threads that spin 5 ms after each team, kiln's
# default where OpenBLAS shares its team (toolchain.OPENMP_SPIN_COUNT), would take CPU time from the other
# processes (20% of the suite's time). A user's choice is kept; the policy changes speed, never results.
os.environ.setdefault("GOMP_SPINCOUNT", "2000")

import kiln  # noqa: E402
from kiln.jit import debug as _jit_debug  # noqa: E402

# Plans build their C before their first replay, on the calling thread, so that every replay a test makes
# runs the generated code it checks (by default the compiler runs in the background while calls run in
# Python: tests/jit/test_background_builds.py tests that).
kiln.jit.set_background_builds(False)

# Every graph a compiler pass returns is checked (Graph.verify) while the tests run, so a
# pass that breaks the IR fails the test that compiled it, naming the pass.
_jit_debug.set_verify(True)


@pytest.fixture(autouse=True)
def _fresh_kiln_state():
    """Each test starts with grad mode on and a seeded generator, whatever the last one did."""
    kiln.manual_seed(0)
    kiln.autograd._state.enabled = True
    yield
    kiln.autograd._state.enabled = True
