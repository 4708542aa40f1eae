"""Every footgun test runs once per backend: the traps are the compiler's, not one backend's."""
from __future__ import annotations

import pytest

from kiln.jit import function
from kiln.jit.backends import BACKENDS, cpu, get_backend

_NAMES = ["interpret"] + (["cpu"] if "cpu" in BACKENDS and cpu.available() else [])


@pytest.fixture(autouse=True, params=_NAMES)
def backend(request, monkeypatch):
    """Make backend="auto" (the default) mean this backend for the test."""
    name = request.param
    monkeypatch.setattr(function, "get_backend", lambda b: get_backend(name if b == "auto" else b))
    return name
