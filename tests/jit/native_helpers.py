"""Shared by the tests of the native runtime's ops: the skip mark, a fresh kernel cache, and plan lookups."""
from __future__ import annotations

import pytest

from kiln.jit.backends import cpu
from kiln.jit.backends.cpu import cpython_layout, runtime

needs_native = pytest.mark.skipif(not cpu.available() or cpython_layout.object_layout() is None,
                                  reason="no C compiler, or generated code cannot read Python objects here")


@pytest.fixture(autouse=True)
def native_cache(monkeypatch, tmp_path):
    """A fresh kernel cache, the native runtime on, and every plan made eagerly (import it to use it)."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu, "NATIVE_RUNTIME", True)
    runtime._made.clear()


def plans_of(compiled) -> list:
    """Every plan of a compiled function's cache entries (forward and backward plans of training entries)."""
    plans = []
    for entry in compiled.cache_entries:
        plans += [entry.plan] if hasattr(entry, "plan") else [entry.forward_plan, entry.backward_plan]
    return plans


def node_kinds(compiled, name: str) -> list[str]:
    """How the current variant of each native plan runs each node of primitive `name`: native / view / python
    (a plan with no native node, replayed in Python, has none)."""
    kinds = []
    for plan in plans_of(compiled):
        if not isinstance(plan, runtime.NativePlan):
            continue
        a = plan.current.analysis
        kinds += [a.kinds[id(n)] for n in a.graph.nodes if n.prim.name == name]
    return kinds
