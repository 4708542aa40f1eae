"""The compiler probe's record on disk (toolchain.py): a new process with a warm cache runs no compiler
subprocess, and the record is trusted only as far as a kernel entry is.

"A new process" is simulated by forgetting the toolchain's per-process state. The compiler
is the real one behind a wrapper script that logs each call.
"""
from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

import kiln
from kiln.jit.backends import cpu
from kiln.jit.backends.cpu import toolchain

needs_cc = pytest.mark.skipif(toolchain.find_compiler() is None or not cpu.available(), reason="no working C compiler")


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """A fresh cache, and $CC a wrapper around the real compiler that counts its calls."""
    real = toolchain.compiler_command()[0]
    log = tmp_path / "calls"
    wrapper = tmp_path / "bin" / "cc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho x >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(stat.S_IRWXU)
    monkeypatch.setenv("CC", str(wrapper))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    cpu._reset_state()
    yield lambda: log.read_text().count("x") if log.exists() else 0
    cpu._reset_state()


def _build_once() -> None:
    compiled = kiln.compile(lambda x: (x * 3.0).relu() @ x.T, backend="cpu")
    x = kiln.randn(4, 5)
    compiled(x)
    assert compiled(x).tolist() == ((x * 3.0).relu() @ x.T).tolist()


def _records(cache: Path) -> list[Path]:
    return sorted((cache / "kernels").glob("k_*.json"))


@needs_cc
def test_a_warm_cache_needs_no_compiler_call(counted, tmp_path):
    _build_once()
    first = counted()
    assert first >= 3  # the probe build, --version, the -march=native macros, the plan's library
    assert len(_records(tmp_path / "cache")) == 1
    cpu._reset_state()  # a new process
    _build_once()
    assert counted() == first, "a new process with a warm cache called the compiler"


@needs_cc
def test_a_tampered_record_is_probed_again(counted, tmp_path):
    _build_once()
    (record,) = _records(tmp_path / "cache")
    real = toolchain.target_features(toolchain.compiler_command())
    forged = ("1" if real[0] == "0" else "0") + real[1:]  # a well-formed target, the hash record not updated
    os.chmod(record, 0o600)
    record.write_text(record.read_text().replace(real, forged))
    cpu._reset_state()
    before = counted()
    _build_once()
    assert counted() > before  # not trusted: probed again
    assert toolchain.target_features(toolchain.compiler_command()) == real
    assert forged not in record.read_text() and real in record.read_text()  # and recorded afresh


@needs_cc
def test_a_changed_compiler_is_probed_again(counted, tmp_path):
    _build_once()
    wrapper = Path(os.environ["CC"])
    later = time.time() + 5
    os.utime(wrapper, (later, later))  # as if the compiler were upgraded
    cpu._reset_state()
    before = counted()
    _build_once()
    assert counted() > before
    assert len(_records(tmp_path / "cache")) == 2


@needs_cc
def test_records_are_kiln_entries(counted, tmp_path):
    _build_once()
    for path in (tmp_path / "cache" / "kernels").iterdir():
        assert toolchain.is_kiln_entry(path.name), path.name
