"""kiln tunes glibc malloc at import unless KILN_MALLOC_TUNING=0."""
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
