"""$KILN_MARCH: the target kernels are built for, in the flags and the cache key; a bad value warns.

A compiler that does not know the target fails the build, which the backend already turns into
an interpreted plan with a warning (tests/jit/test_kernel_cache.py covers failing compilers).
"""
from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from kiln.jit.backends import cpu

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

PROBE = ("from kiln.jit.backends.cpu import toolchain; "
         "cmd = toolchain.compiler_command(); "
         "print(toolchain.march()); print(' '.join(toolchain.FLAGS)); "
         "print(toolchain.kernel_key('int x;', cmd)); print(toolchain.target_features(cmd))")


def _probe(march: str | None, tmp_path) -> tuple[str, str, str, str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KILN_CACHE_DIR": str(tmp_path)}
    if march is not None:
        env["KILN_MARCH"] = march
    out = subprocess.run([sys.executable, "-W", "always", "-c", PROBE], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    march_seen, flags, key, target = out.stdout.splitlines()
    return march_seen, flags, key + target, out.stderr


def test_default_is_native_and_kiln_march_changes_flags_and_key(tmp_path):
    native, native_flags, native_key, _ = _probe(None, tmp_path)
    assert native == "native" and "-march=native" in native_flags.split()
    lower = "x86-64-v2" if platform.machine().lower() in ("x86_64", "amd64") else "armv8-a"
    v2, v2_flags, v2_key, _ = _probe(lower, tmp_path)
    assert f"-march={v2}" in v2_flags.split() and "-march=native" not in v2_flags.split()
    assert v2_key != native_key, "kernels built for another target must not share cache entries"


def test_a_bad_value_warns_and_builds_for_native(tmp_path):
    march, flags, _, stderr = _probe("x86-64-v3; rm -rf /", tmp_path)
    assert march == "native" and "-march=native" in flags.split()
    assert "KILN_MARCH must name a -march target" in stderr and "x86-64-v3; rm -rf /" in stderr
