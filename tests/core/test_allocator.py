"""kiln tunes glibc malloc at import unless KILN_MALLOC_TUNING=0, and hands memory back after large compiles."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="malloc tuning applies to glibc only")


def _tuned(env_value: str | None) -> str:
    env = dict(os.environ)
    env.pop("KILN_MALLOC_TUNING", None)
    if env_value is not None:
        env["KILN_MALLOC_TUNING"] = env_value
    code = "import kiln, kiln.allocator as a; print(a.tuned)"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


@glibc
def test_import_tunes_malloc():
    assert _tuned(None) == "True"


@glibc
def test_env_var_turns_tuning_off():
    assert _tuned("0") == "False"


def test_a_large_compile_gives_memory_back_after_it_and_once_more_on_the_next_call(monkeypatch):
    # the compiling call's result may hold its trace's forward arrays (a training call's graph) until the
    # user's backward: they are handed back on the next call, once
    import kiln
    from kiln.jit import function

    calls = []
    monkeypatch.setattr(function, "RELEASE_AFTER_BYTES", 0)
    monkeypatch.setattr(function, "release_free_memory", lambda: calls.append(1))
    model = kiln.compile(kiln.nn.Linear(3, 2))
    x = kiln.randn(4, 3)
    model(x).sum().backward()
    assert len(calls) == 1
    for _ in range(3):
        model(x).sum().backward()
    assert len(calls) == 2
