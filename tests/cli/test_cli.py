"""The ``kiln`` command line, run as ``python -m kiln`` in a subprocess like a user would."""
from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kiln.cli import main

ROOT = Path(__file__).resolve().parents[2]
SIMD = r"(AVX-512|AVX2|AVX|SSE4\.2|SSE2|SVE2|SVE|NEON|scalar)"
SIMD_LINE = rf"cpu: .+: {SIMD}; kernels built for ({SIMD}|unknown) \(-march=\S+\)"


def run_kiln(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=ROOT)


def test_info_prints_versions_compiler_cache_and_devices(tmp_path):
    result = run_kiln("info", env={"KILN_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr
    for expected in ("kiln 0.", "python 3.", "numpy ", "C compiler:", "cpu: ", "kernel cache:", "devices: cpu"):
        assert expected in result.stdout
    assert re.search(SIMD_LINE, result.stdout), result.stdout  # the CPU's SIMD level and the kernels'
    assert str(tmp_path / "cache") in result.stdout


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64-v2 is an x86 -march")
def test_info_names_the_simd_level_of_a_lower_kiln_march(tmp_path):
    result = run_kiln("info", env={"KILN_MARCH": "x86-64-v2", "KILN_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr
    assert re.search(r"kernels built for (SSE4\.2|unknown) \(-march=x86-64-v2\)", result.stdout), result.stdout


@pytest.mark.parametrize("args", [["--bogus"], ["demo", "--bogus"], ["demo", "--epochs", "0"],
                                  ["demo", "--epochs", "two"], ["cache", "wipe"], ["nonsense"]])
def test_bad_flags_print_usage_and_exit_2(args):
    result = run_kiln(*args)
    assert result.returncode == 2
    assert "usage:" in result.stderr and "Traceback" not in result.stderr


def test_unwritable_out_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    start = time.perf_counter()
    result = run_kiln("demo", "--epochs", "1", "--out", str(blocker / "out"))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith("kiln demo: error:") and "--out" in lines[0]
    assert time.perf_counter() - start < 30, "a bad --out must fail before training"


@pytest.mark.parametrize("mode", [["--eager"], []], ids=["eager", "compile"])
def test_demo_one_epoch_runs_and_saves_weights(tmp_path, mode):
    result = run_kiln("demo", "--epochs", "1", *mode, "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "epoch  1/1" in out and "test accuracy:" in out and "time per training step:" in out
    weights = [p.name for p in (tmp_path / "out").iterdir()]
    assert any(name.startswith("weights.") for name in weights)
    assert ("plot: " in out) and ("matplotlib" in out or "training.png" in weights)
    assert "Traceback" not in result.stderr


def test_cache_info_and_clear(tmp_path):
    cache = tmp_path / "kiln-cache"
    kernels = cache / "kernels"
    (kernels / "kiln-tmp-abc123").mkdir(parents=True)  # a build folder a killed process left behind
    (kernels / "kiln-tmp-abc123" / "kernel.c").write_text("void f(void) {}")
    (kernels / "k_0123456789abcdef0123456789abcdef.so").write_bytes(b"x" * 2048)
    (kernels / "k_0123456789abcdef0123456789abcdef.sha256").write_text("0" * 64 + "  k_0123.so\n")
    (kernels / "k_0123456789abcdef0123456789abcdef.lock").write_bytes(b"")
    (kernels / "notes.txt").write_text("the user's own file")  # not kiln's: never removed
    (kernels / "k_mine.so").write_bytes(b"not kiln's naming")
    (cache / "precious.txt").write_text("keep me")
    env = {"KILN_CACHE_DIR": str(cache)}
    info = run_kiln("cache", env=env)
    assert info.returncode == 0 and "1 kernels, 4 kiln files" in info.stdout, info.stdout + info.stderr
    cleared = run_kiln("cache", "clear", env=env)
    assert cleared.returncode == 0 and "removed 4 kiln files" in cleared.stdout, cleared.stdout + cleared.stderr
    assert "left 2 other files alone" in cleared.stdout
    assert sorted(p.name for p in kernels.iterdir()) == ["k_mine.so", "notes.txt"]
    assert (cache / "precious.txt").read_text() == "keep me"
    again = run_kiln("cache", "clear", env=env)
    assert again.returncode == 0 and "removed 0 kiln files" in again.stdout
    assert run_kiln("cache", "clear", env={"KILN_CACHE_DIR": str(tmp_path / "none")}).returncode == 0


def test_cache_clear_removes_what_a_compile_built(tmp_path):
    cache = tmp_path / "kiln-cache"
    env = {"KILN_CACHE_DIR": str(cache), "KILN_SHARED_BLAS_TEAM": "0"}  # one kernel: no BLAS team callback library
    script = ("import kiln; from kiln.jit.backends.cpu import elementwise_groups; elementwise_groups.MIN_ELEMENTS = 1\n"
              "kiln.compile(lambda x: (x * 2.0).relu(), backend='cpu')(kiln.randn(3, 3))\n")
    built = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ, **env},
                           cwd=ROOT, timeout=120)
    assert built.returncode == 0, built.stderr
    kernels = cache / "kernels"
    if not list(kernels.glob("k_*.so")):
        pytest.skip("no working C compiler: nothing was built")
    (kernels / "mine.txt").write_text("keep")
    info = run_kiln("cache", "info", env=env)
    assert "1 kernels" in info.stdout and "NOT USED" not in info.stdout
    assert run_kiln("cache", "clear", env=env).returncode == 0
    assert [p.name for p in kernels.iterdir()] == ["mine.txt"]


def test_cache_info_flags_an_unsafe_cache(tmp_path):
    kernels = tmp_path / "kiln-cache" / "kernels"
    kernels.mkdir(parents=True)
    kernels.chmod(0o777)
    info = run_kiln("cache", "info", env={"KILN_CACHE_DIR": str(tmp_path / "kiln-cache")})
    assert info.returncode == 0 and "NOT USED" in info.stdout and "chmod 700" in info.stdout


def test_cache_clear_refuses_the_home_directory(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "precious.txt").write_text("keep me")
    result = run_kiln("cache", "clear", env={"HOME": str(home), "KILN_CACHE_DIR": str(home)})
    assert result.returncode == 1 and "refusing" in result.stderr
    assert (home / "precious.txt").exists()


def test_no_command_prints_help(capsys):
    assert main([]) == 0
    assert "demo" in capsys.readouterr().out


def test_bench_without_workload_lists_workloads(capsys):
    assert main(["bench"]) == 0
    assert "eager-overhead" in capsys.readouterr().out


def test_cli_default_epochs_match_the_demo_config():
    from kiln.cli import DEMO_EPOCHS
    from kiln.demo import DemoConfig

    assert DEMO_EPOCHS == DemoConfig().epochs
