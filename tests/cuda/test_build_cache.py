"""tests/build_cache.py: the same inputs reuse the outputs, any other input builds again, failures are not kept."""
from __future__ import annotations

import sys

import pytest

from build_cache import cached_build


def _builder(out, calls, content):
    def build():
        calls.append(content)
        out.write_text(content)
    return build


def test_the_same_inputs_copy_the_output_and_others_build(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_TEST_BUILD_CACHE", str(tmp_path / "cache"))
    out, calls = tmp_path / "a.out", []
    cached_build(sys.executable, ["-x"], "source 1", [out], _builder(out, calls, "built from 1"))
    out.unlink()
    cached_build(sys.executable, ["-x"], "source 1", [out], _builder(out, calls, "never"))
    assert out.read_text() == "built from 1" and calls == ["built from 1"]
    cached_build(sys.executable, ["-x"], "source 2", [out], _builder(out, calls, "built from 2"))
    cached_build(sys.executable, ["-y"], "source 1", [out], _builder(out, calls, "built with -y"))
    assert calls == ["built from 1", "built from 2", "built with -y"] and out.read_text() == "built with -y"


def test_a_failed_build_is_not_cached_and_off_builds_every_time(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_TEST_BUILD_CACHE", str(tmp_path / "cache"))
    out, calls = tmp_path / "a.out", []

    def failing():
        calls.append("failed")
        raise AssertionError("the compiler said no")

    with pytest.raises(AssertionError, match="said no"):
        cached_build(sys.executable, [], "bad", [out], failing)
    with pytest.raises(AssertionError, match="said no"):
        cached_build(sys.executable, [], "bad", [out], failing)
    assert calls == ["failed", "failed"]
    monkeypatch.setenv("KILN_TEST_BUILD_CACHE", "off")
    for _ in range(2):
        cached_build(sys.executable, [], "good", [out], _builder(out, calls, "built"))
    assert calls == ["failed", "failed", "built", "built"]
    cache = tmp_path / "cache"
    assert not cache.exists() or not any(cache.iterdir())
