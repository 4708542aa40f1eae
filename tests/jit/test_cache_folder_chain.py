"""The kernel cache is used only when every folder above it, up to the root, is safe.

Whoever may write to a folder that is not sticky may rename what is in it, and so could put
their own kernels folder in place of kiln's between the checks and the load. So every folder
from the cache up to / must be owned by this user or root and not writable by group or others
unless sticky like /tmp. Otherwise kiln warns, naming the folder and the fix, and builds in a
private temporary folder. Ownership of the chain is tested only where the tests run as root
(which can hand a folder to another user).
"""
from __future__ import annotations

import os
import stat
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.jit.backends import cpu
from kiln.jit.backends.cpu import elementwise_groups, toolchain

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_cc = pytest.mark.skipif(toolchain.find_compiler() is None or not cpu.available(), reason="no working C compiler")


@pytest.fixture
def fresh(monkeypatch):
    """No toolchain state (loaded kernels, warnings, private folder) from before or after the test."""
    monkeypatch.setattr(elementwise_groups, "MIN_ELEMENTS", 1)
    monkeypatch.delenv("KILN_CC_TIMEOUT", raising=False)
    cpu._reset_state()
    yield
    cpu._reset_state()


def _tree(tmp_path: Path, mode: int, depth: int = 1) -> tuple[Path, Path]:
    """(folder with `mode`, cache base `depth` levels below it); every other folder is 0700."""
    top = tmp_path / "shared"
    base = top.joinpath(*[f"level{i}" for i in range(depth - 1)], "cache")
    base.mkdir(parents=True, mode=0o700)
    os.chmod(top, mode)
    return top, base


def _kernel_dir(monkeypatch, base: Path) -> tuple[Path, list[str]]:
    """kernel_dir() for KILN_CACHE_DIR=`base`, and the kiln warnings it gave."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(base))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        folder = toolchain.kernel_dir()
    return folder, [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("depth", [1, 3])
def test_a_world_writable_folder_above_the_cache_is_refused(fresh, monkeypatch, tmp_path, depth):
    top, base = _tree(tmp_path, 0o777, depth)
    folder, caught = _kernel_dir(monkeypatch, base)
    assert len(caught) == 1, caught
    message = caught[0]
    assert f"not using the kernel cache {base / 'kernels'}" in message
    assert (f"{top}, a folder above the kernel cache, is writable by group and others and not sticky (mode 777), "
            "so they could rename the cache folder inside it") in message
    assert f"Fix: chmod go-w {top} (or chmod +t {top} to make it sticky like /tmp)" in message
    assert "KILN_CACHE_DIR" in message
    assert folder != base / "kernels" and stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert base / "kernels" not in folder.parents
    assert _kernel_dir(monkeypatch, base)[1] == []  # warned once per process


def test_a_group_writable_folder_above_the_cache_is_refused(fresh, monkeypatch, tmp_path):
    top, base = _tree(tmp_path, 0o770, depth=2)
    problem, fix = toolchain.cache_problem(base / "kernels")
    assert problem.startswith(f"{top}, a folder above the kernel cache, is writable by group and not sticky")
    assert fix.startswith(f"chmod g-w {top}")


def test_the_outermost_unsafe_folder_is_named(fresh, tmp_path):
    top, base = _tree(tmp_path, 0o777, depth=3)
    os.chmod(base.parent, 0o777)
    assert toolchain.cache_problem(base / "kernels")[0].startswith(f"{top},")


@pytest.mark.parametrize("mode", [0o1777, 0o1770])
def test_a_sticky_writable_folder_above_the_cache_is_accepted(fresh, monkeypatch, tmp_path, mode):
    _, base = _tree(tmp_path, mode, depth=2)
    folder, caught = _kernel_dir(monkeypatch, base)
    assert caught == [] and folder == base / "kernels"
    assert toolchain.cache_problem(folder) is None


def test_a_safe_chain_is_accepted(fresh, monkeypatch, tmp_path):
    _, base = _tree(tmp_path, 0o755, depth=3)
    folder, caught = _kernel_dir(monkeypatch, base)
    assert caught == [] and folder == base / "kernels"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.skipif(not IS_ROOT, reason="handing a folder to another user needs root")
def test_a_folder_above_the_cache_owned_by_another_user_is_refused(fresh, monkeypatch, tmp_path):
    top, base = _tree(tmp_path, 0o755, depth=2)
    os.chown(top, 65534, 65534)
    _, caught = _kernel_dir(monkeypatch, base)
    assert len(caught) == 1
    assert f"{top} is owned by another user (uid 65534, you are uid 0), who could swap the kernels folder" in caught[0]


def test_a_symlink_above_the_cache_is_checked_where_it_leads_and_resolved(fresh, monkeypatch, tmp_path):
    top, base = _tree(tmp_path, 0o777, depth=2)
    link = tmp_path / "link"
    link.symlink_to(base)
    _, caught = _kernel_dir(monkeypatch, link)
    assert len(caught) == 1 and f"{top}, a folder above the kernel cache" in caught[0]
    os.chmod(top, 0o755)
    cpu._reset_state()
    folder, caught = _kernel_dir(monkeypatch, link)
    assert caught == [] and folder == base / "kernels"  # the checked path, not one through the link


def test_an_unsafe_temporary_folder_is_refused_too(fresh, monkeypatch, tmp_path):
    top, base = _tree(tmp_path, 0o777, depth=1)
    temp = top / "tmp"
    temp.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    with pytest.raises(toolchain.CompilerUnavailable) as info:
        _kernel_dir(monkeypatch, base)
    message = str(info.value)
    assert "no safe folder to build kernels in" in message and f"{top}, a folder above" in message
    assert f"chmod go-w {top}" in message and "TMPDIR" in message
    assert not any(temp.iterdir())  # the refused folder was removed


def test_cache_info_names_the_unsafe_folder(fresh, monkeypatch, tmp_path):
    from kiln.cli import describe_kernel_cache

    top, base = _tree(tmp_path, 0o777, depth=2)
    (base / "kernels").mkdir(mode=0o700)
    text = describe_kernel_cache(base)
    assert f"NOT USED: {top}, a folder above the kernel cache" in text and f"chmod go-w {top}" in text


@needs_cc
def test_no_kernel_is_built_or_loaded_under_an_unsafe_folder(fresh, monkeypatch, tmp_path):
    _, base = _tree(tmp_path, 0o777, depth=2)
    monkeypatch.setenv("KILN_CACHE_DIR", str(base))
    x = kiln.randn(4, 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = kiln.compile(lambda x: (x * 3.0).relu() - 1.5, backend="cpu")(x)
    np.testing.assert_allclose(got.numpy(), ((x * 3.0).relu() - 1.5).numpy(), rtol=1e-6)
    assert any("a folder above the kernel cache" in str(w.message) for w in caught)
    assert not (base / "kernels").exists() or not any((base / "kernels").iterdir())
    assert list(toolchain.kernel_dir().glob("k_*.so"))  # built in the private folder instead
