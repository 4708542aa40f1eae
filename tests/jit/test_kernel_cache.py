"""The CPU backend's kernel cache is trusted only as far as it deserves: loading a .so is running code.

Private folders, hash records checked before loading, no symlinks, a key that covers the
whole toolchain, rebuilds of bad entries, and one warning (then the interpreter) for every
kind of broken compiler. Fake compilers are tiny shell scripts.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.jit.backends import cpu, get_backend
from kiln.jit.backends.cpu import blas_team, elementwise_groups, toolchain

ROOT = Path(__file__).resolve().parents[2]
REAL_CC = toolchain.find_compiler()
needs_cc = pytest.mark.skipif(REAL_CC is None or not cpu.available(), reason="no working C compiler")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _program(x):
    return (x * 3.0).relu() - 1.5


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """A fresh KILN_CACHE_DIR, fusion of tiny arrays, and no per-process toolchain state either way. The BLAS
    team's callback library (blas_team.py) is not built into it: these tests count the entries."""
    monkeypatch.setattr(elementwise_groups, "MIN_ELEMENTS", 1)
    monkeypatch.setattr(blas_team, "_state", {"shared": False})
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KILN_CC_TIMEOUT", raising=False)
    cpu._reset_state()
    yield tmp_path / "cache"
    cpu._reset_state()


def _run_compiled(x=None):
    """Compile the program for the cpu backend and check it equals eager; the warnings it gave."""
    x = kiln.randn(4, 5) if x is None else x
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = kiln.compile(_program, backend="cpu")
        got = f(x)
    np.testing.assert_allclose(got.numpy(), _program(x).numpy(), rtol=1e-6)
    return [w for w in caught if issubclass(w.category, RuntimeWarning) and "kiln" in str(w.message)]


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("k_*.so"))


def _fresh_load():
    """Forget the libraries loaded in this process, so the next compile reads the disk cache."""
    toolchain._loaded.clear()


def _compile_c(source: str, out: Path) -> bytes:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run([*toolchain.compiler_command(), "-shared", "-fPIC", str(src), "-o", str(out)], check=True)
    return out.read_bytes()


def _planted_library(tmp_path: Path, marker: Path) -> bytes:
    """A library that exports kiln_fused (doing nothing) and writes `marker` the moment it is loaded."""
    return _compile_c(textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{
            FILE *f = fopen("{marker}", "w");
            if (f) {{ fputs("loaded", f); fclose(f); }}
        }}
        void kiln_fused(long long outer, long long inner, float *out) {{ (void)outer; (void)inner; (void)out; }}
        """), tmp_path / "planted.so")


def _record(so: Path, data: bytes) -> None:
    so.with_suffix(".sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  {so.name}\n")


# ---- the folder ---------------------------------------------------------------------------
@needs_cc
def test_the_cache_is_created_private_and_records_each_hash(cache):
    assert _run_compiled() == []
    kernels = cache / "kernels"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(kernels.stat().st_mode) == 0o700
    (so,) = _entries(kernels)
    digest, name = so.with_suffix(".sha256").read_text().split()
    assert name == so.name and digest == hashlib.sha256(so.read_bytes()).hexdigest()
    assert all(toolchain.is_kiln_entry(p.name) for p in kernels.iterdir())
    _fresh_load()
    assert _run_compiled() == []  # loaded from the cache, no rebuild
    assert _entries(kernels) == [so]


@needs_cc
@pytest.mark.parametrize("where, mode, problem", [("kernels", 0o777, "writable by group and others"),
                                                  ("kernels", 0o770, "writable by group"),
                                                  ("base", 0o777, "writable by group and others")])
def test_a_cache_others_can_write_is_not_used(cache, where, mode, problem):
    (cache / "kernels").mkdir(parents=True)
    bad = cache / "kernels" if where == "kernels" else cache
    os.chmod(bad, mode)
    caught = _run_compiled()
    assert len(caught) == 1
    message = str(caught[0].message)
    assert str(bad) in message and problem in message and "chmod 700" in message and "KILN_CACHE_DIR" in message
    assert _entries(cache / "kernels") == [] and not any((cache / "kernels").iterdir())
    private = toolchain.kernel_dir()
    assert stat.S_IMODE(private.stat().st_mode) == 0o700 and len(_entries(private)) == 1
    assert _run_compiled(kiln.randn(2, 3)) == []  # warned once per process


@needs_cc
def test_a_symlinked_kernels_folder_is_not_used(cache, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    cache.mkdir(mode=0o700)
    (cache / "kernels").symlink_to(elsewhere)
    caught = _run_compiled()
    assert len(caught) == 1 and "symlink" in str(caught[0].message)
    assert not any(elsewhere.iterdir())


@needs_cc
@pytest.mark.skipif(not IS_ROOT, reason="making a folder owned by another user needs root")
def test_a_cache_owned_by_another_user_is_not_used(cache):
    (cache / "kernels").mkdir(parents=True, mode=0o700)
    os.chown(cache / "kernels", 65534, 65534)  # root must not load code a less trusted user could plant
    caught = _run_compiled()
    assert len(caught) == 1
    assert "owned by another user (uid 65534" in str(caught[0].message)
    assert _entries(cache / "kernels") == []


def _python_runs_as_nobody() -> bool:
    try:
        return subprocess.run([sys.executable, "-c", "import numpy"], user=65534, group=65534,
                              capture_output=True, timeout=60, cwd="/").returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@needs_cc
def test_an_unprivileged_process_does_not_use_a_cache_owned_by_root():
    if not IS_ROOT:
        pytest.skip("needs root to drop privileges to uid 65534 in a child process")
    if not _python_runs_as_nobody():
        pytest.skip(f"uid 65534 cannot run {sys.executable} (it lives in a folder only root may enter)")
    base = Path(tempfile.mkdtemp(prefix="kiln-owner-test-"))
    try:
        os.chmod(base, 0o755)
        kernels = base / "cache" / "kernels"
        kernels.mkdir(parents=True)
        os.chmod(kernels.parent, 0o755)
        os.chmod(kernels, 0o755)
        script = ("import kiln, numpy as np; from kiln.jit.backends.cpu import elementwise_groups\n"
                  "elementwise_groups.MIN_ELEMENTS = 1\n"
                  "x = kiln.randn(4, 5); f = kiln.compile(lambda x: (x * 3.0).relu(), backend='cpu')\n"
                  "np.testing.assert_allclose(f(x).numpy(), (x * 3.0).relu().numpy(), rtol=1e-6); print('ok')\n")
        env = {"PATH": os.environ.get("PATH", ""), "KILN_CACHE_DIR": str(base / "cache"), "HOME": str(base),
               "PYTHONPATH": str(ROOT)}
        result = subprocess.run([sys.executable, "-c", script], user=65534, group=65534, env=env, cwd="/",
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0 and "ok" in result.stdout, result.stderr
        assert "owned by another user (uid 0" in result.stderr and str(kernels) in result.stderr
        assert not any(kernels.iterdir())
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ---- entries ------------------------------------------------------------------------------
@needs_cc
@pytest.mark.parametrize("record", ["none", "stale", "malformed", "symlink"])
def test_a_planted_library_is_never_loaded(cache, tmp_path, record):
    _run_compiled()
    (so,) = _entries(cache / "kernels")
    marker = tmp_path / "marker"
    planted = _planted_library(tmp_path, marker)
    sidecar = so.with_suffix(".sha256")
    if record == "symlink":  # even with a record that matches the planted bytes
        so.unlink()
        so.symlink_to(tmp_path / "planted.so")
        _record(so, planted)
    else:
        so.write_bytes(planted)
        if record == "none":
            sidecar.unlink()
        elif record == "malformed":
            sidecar.write_text("not a hash\n")
    _fresh_load()
    caught = _run_compiled()
    assert not marker.exists(), "a planted library was loaded"
    assert len(caught) == 1 and str(so) in str(caught[0].message) and "rebuilding" in str(caught[0].message)
    assert not so.is_symlink()
    assert so.read_bytes() != planted
    assert sidecar.read_text().split()[0] == hashlib.sha256(so.read_bytes()).hexdigest()


@needs_cc
@pytest.mark.parametrize("damage", ["truncated", "garbage", "wrong_symbol", "empty", "folder"])
def test_a_damaged_entry_is_rebuilt_with_a_warning(cache, tmp_path, damage):
    _run_compiled()
    (so,) = _entries(cache / "kernels")
    good = so.read_bytes()
    if damage == "truncated":  # its record still describes the whole library
        so.write_bytes(good[: len(good) // 2])
    elif damage == "garbage":  # a record that matches, so only dlopen can tell
        so.write_bytes(b"\x7fELF garbage" * 100)
        _record(so, so.read_bytes())
    elif damage == "wrong_symbol":
        other = _compile_c("int something_else(void) { return 1; }\n", tmp_path / "other.so")
        so.write_bytes(other)
        _record(so, other)
    elif damage == "empty":
        so.write_bytes(b"")
    else:
        so.unlink()
        so.mkdir()
    _fresh_load()
    caught = _run_compiled()
    assert len(caught) >= 1 and str(so) in str(caught[0].message)
    assert all(issubclass(w.category, RuntimeWarning) for w in caught)
    if damage != "folder":  # a folder in its place cannot be renamed over: the kernel is just not stored
        assert so.read_bytes() == good
        _fresh_load()
        assert _run_compiled() == []


@needs_cc
def test_a_fifo_in_place_of_an_entry_does_not_hang(cache):
    _run_compiled()
    (so,) = _entries(cache / "kernels")
    so.unlink()
    os.mkfifo(so)
    _fresh_load()
    caught = _run_compiled()
    assert len(caught) == 1 and "not a regular file" in str(caught[0].message)


# ---- the key ------------------------------------------------------------------------------
@needs_cc
@pytest.mark.parametrize("change", ["version", "target", "flags", "command"])
def test_the_key_covers_the_whole_toolchain(cache, monkeypatch, change):
    command = toolchain.compiler_command()
    before = toolchain.kernel_key("int x;", command)
    if change == "version":
        monkeypatch.setitem(toolchain._versions, tuple(command), "gcc 99.1")
    elif change == "target":
        monkeypatch.setitem(toolchain._targets, tuple(command), "another-cpu")
    elif change == "flags":
        monkeypatch.setattr(toolchain, "FLAGS", [*toolchain.FLAGS, "-ffast-math"])
    else:
        command = [*command, "-O2"]
    assert toolchain.kernel_key("int x;", command) != before


@needs_cc
def test_version_and_target_are_queried_once_per_process(cache, monkeypatch):
    calls = []
    real_run = toolchain._run
    monkeypatch.setattr(toolchain, "_run", lambda argv, timeout: calls.append(argv) or real_run(argv, timeout))
    command = toolchain.compiler_command()
    version = toolchain.compiler_version(command)
    assert version != "unknown" and "\n" not in version
    target = toolchain.target_features(command)
    for _ in range(3):
        toolchain.kernel_key("int x;", command)
    assert len(calls) == 2 and toolchain.target_features(command) == target


def test_the_target_query_survives_a_compiler_that_fails(cache):
    fake = ["/bin/false"] if Path("/bin/false").exists() else [sys.executable, "-c", "raise SystemExit(1)"]
    assert toolchain.target_features(fake) and toolchain.compiler_version(fake) == "unknown"


# ---- broken compilers ---------------------------------------------------------------------
def _fake_compiler(folder: Path, body: str, name: str = "fake-cc") -> Path:
    folder.mkdir(exist_ok=True)
    script = folder / name
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return script


FAKES = {
    "exits_1": "echo 'fake-cc: internal error' >&2; exit 1",
    "silent": "exit 0",
    "garbage_output": 'while [ $# -gt 0 ]; do if [ "$1" = -o ]; then echo junk > "$2"; fi; shift; done; exit 0',
    "hangs": "sleep 30",
}


@pytest.mark.parametrize("kind", [*FAKES, "missing", "unparsable"])
def test_a_broken_compiler_means_one_warning_and_the_interpreter(cache, monkeypatch, tmp_path, kind):
    if kind == "missing":
        monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    elif kind == "unparsable":
        monkeypatch.setenv("CC", 'gcc "-O2')
    else:
        monkeypatch.setenv("CC", str(_fake_compiler(tmp_path / "bin", FAKES[kind])))
    monkeypatch.setenv("KILN_CC_TIMEOUT", "0.5")
    start = time.perf_counter()
    assert get_backend("auto")[0] == "interpret"
    caught = _run_compiled() + _run_compiled(kiln.randn(3, 2)) + _run_compiled(kiln.randn(6))
    assert len(caught) == 1 and "code generator is unavailable" in str(caught[0].message)
    assert time.perf_counter() - start < 20, "a hanging compiler must be given up on once, quickly"
    expected = {"exits_1": "internal error", "silent": "wrote no library", "garbage_output": "cannot use",
                "hangs": "KILN_CC_TIMEOUT", "missing": "not found", "unparsable": "cannot parse $CC"}[kind]
    assert expected in str(caught[0].message)
    f = kiln.compile(_program, backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        f(kiln.randn(4, 5))
    assert not any(n.prim.name.startswith("fused") for n in f.cache_entries[0].plan.graph.nodes)


@pytest.mark.parametrize("kind", ["exits_1", "silent"])
def test_a_broken_cc_on_path_makes_auto_interpret(cache, monkeypatch, tmp_path, kind):
    bin_dir = tmp_path / "bin"
    for name in ("cc", "gcc", "clang"):
        _fake_compiler(bin_dir, FAKES[kind], name)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert toolchain.find_compiler() == str(bin_dir / "cc")  # found on PATH ...
    assert not cpu.available()  # ... but it does not work
    assert get_backend("auto")[0] == "interpret"


@needs_cc
def test_the_probe_compiles_once_per_process(cache, monkeypatch, tmp_path):
    log = tmp_path / "calls"
    wrapper = _fake_compiler(tmp_path / "bin", f'echo x >> "{log}"; exec {toolchain.compiler_command()[0]} "$@"')
    monkeypatch.setenv("CC", str(wrapper))
    for _ in range(3):
        assert cpu.available() and get_backend("auto")[0] == "cpu"
    assert log.read_text().count("x") == 2  # the probe build and the OpenMP probe build


@needs_cc
def test_cc_with_flags_is_split_like_a_shell_would(cache, monkeypatch):
    monkeypatch.setenv("CC", f"{Path(toolchain.compiler_command()[0]).name} -O2")
    assert toolchain.compiler_command()[1:] == ["-O2"]
    assert cpu.available()
    assert _run_compiled() == []
    assert len(_entries(cache / "kernels")) == 1


def test_a_bad_timeout_setting_is_reported(cache, monkeypatch):
    monkeypatch.setenv("KILN_CC_TIMEOUT", "soon")
    with pytest.raises(toolchain.CompilerUnavailable, match="KILN_CC_TIMEOUT='soon'"):
        toolchain.compiler_timeout()


def test_a_hung_compiler_and_its_children_are_killed(tmp_path):
    script = _fake_compiler(tmp_path / "bin", "sleep 30 & sleep 30; wait")
    start = time.perf_counter()
    with pytest.raises(toolchain.CompilerTimeout, match="did not finish within 0.3 s"):
        toolchain._run([str(script)], 0.3)
    assert time.perf_counter() - start < 3, "the script's children must be killed too (they hold its pipes)"


def test_reset_state_forgets_everything(cache, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert not cpu.available()
    _run_compiled()
    assert cpu._warned
    cpu._reset_state()
    assert not cpu._warned and not toolchain._probed and not toolchain._loaded and not toolchain._warned_dirs


# ---- concurrency --------------------------------------------------------------------------
_RACE = """
import os, sys, time
from pathlib import Path
import numpy as np
from kiln.jit.backends.cpu import toolchain
go = Path(sys.argv[1])
Path(sys.argv[2]).touch()
while not go.exists():
    time.sleep(0.005)
source = "void kiln_fused(long long outer, long long inner, double *out) { out[0] = 42.0; }\\n"
lib = toolchain.build(source)
out = np.zeros(1)
lib.kiln_fused(0, 0, out.ctypes.data_as(__import__("ctypes").c_void_p))
assert out[0] == 42.0
print(lib.kiln_sha256)
"""


@needs_cc
def test_two_processes_building_one_kernel_load_the_same_verified_library(tmp_path):
    # one entry in the cache: the BLAS team's callback library (blas_team.py) stays out
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT),
           "KILN_SHARED_BLAS_TEAM": "0"}
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _RACE, str(go), str(tmp_path / f"ready{i}")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready{i}").exists() for i in range(2)) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    results = [p.communicate(timeout=240) for p in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err
        assert "Warning" not in err, err
    hashes = {out.strip() for out, _ in results}
    (so,) = _entries(tmp_path / "cache" / "kernels")
    assert hashes == {hashlib.sha256(so.read_bytes()).hexdigest()}
    assert so.with_suffix(".sha256").read_text().split()[0] in hashes


@needs_cc
def test_kernels_build_concurrently_and_each_key_once(cache, monkeypatch):
    """Different kernels compile side by side (a training plan's forward and backward); two threads
    asking for one kernel compile it once and share the library."""
    import threading

    compiled, running, overlap = [], [0], [False]
    real_compile = toolchain._compile
    guard = threading.Lock()

    def tracking(command, source, workdir, extra=None, low_priority=False):
        with guard:
            running[0] += 1
            overlap[0] |= running[0] > 1
        try:
            time.sleep(0.2)  # long enough for the other thread to arrive while this one compiles
            compiled.append(source)
            return real_compile(command, source, workdir, extra, low_priority)
        finally:
            with guard:
                running[0] -= 1

    monkeypatch.setattr(toolchain, "_compile", tracking)
    sources = [f"int kiln_probe_{k}(void) {{ return {k}; }}\n" for k in range(2)]
    libs: dict[int, object] = {}

    def build(k, source):
        libs[k] = toolchain.build(source, f"kiln_probe_{k % 2}")

    threads = [threading.Thread(target=build, args=(k, src)) for k, src in enumerate(sources + sources[:1])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap[0], "the two kernels did not compile at the same time"
    # the repeated source compiled once (the compiler's OpenMP probe compiles too)
    assert sorted(c for c in compiled if c.startswith("int kiln_probe_")) == sorted(sources)
    assert libs[0] is libs[2]
    assert [getattr(libs[k], f"kiln_probe_{k}")() for k in (0, 1)] == [0, 1]
