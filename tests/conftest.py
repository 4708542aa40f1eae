"""Shared test setup: make tests/ helper modules importable and reset kiln's global state."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kiln  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_kiln_state():
    """Each test starts with grad mode on and a seeded generator, whatever the last one did."""
    kiln.manual_seed(0)
    kiln.autograd._state.enabled = True
    yield
    kiln.autograd._state.enabled = True
