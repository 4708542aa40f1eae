"""KILN_DEBUG: traces, cache misses with their reasons, and pass timings on the "kiln.jit" logger."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import kiln
from kiln.jit import debug

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def jit_log(caplog):
    caplog.set_level(logging.DEBUG, logger="kiln.jit")
    return caplog


def _messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kiln.jit"]


def _scaled_sum(x, w):
    return ((x @ w) * 2.0 + 0.0).sum()


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "yes", "all", " all ", "on"])
def test_switch_on_words_enable_every_topic(value):
    assert debug.enabled_topics(value) == {"trace", "miss", "passes", "graphs", "kernels", "verify"}


@pytest.mark.parametrize("value", ["", "0", "false", "no", "off"])
def test_switch_off_words_enable_nothing(value):
    assert debug.enabled_topics(value) == frozenset()


def test_a_comma_list_selects_topics():
    assert debug.enabled_topics("trace,miss") == {"trace", "miss"}
    assert debug.enabled_topics("passes") == {"passes"}
    assert debug.enabled_topics("misses, traces") == {"miss", "trace"}
    assert debug.enabled_topics("miss,all") == {"trace", "miss", "passes", "graphs", "kernels", "verify"}
    assert debug.enabled_topics("graph,verify") == {"graphs", "verify"}


def test_an_unknown_topic_is_reported_once_and_ignored(jit_log):
    assert debug.enabled_topics("miss,bogus-topic") == {"miss"}
    assert debug.enabled_topics("miss,bogus-topic") == {"miss"}
    said = [m for m in _messages(jit_log) if "bogus-topic" in m]
    assert len(said) == 1 and "trace, miss, passes, graphs, kernels, verify" in said[0]


def test_kiln_debug_1_logs_trace_miss_and_passes(monkeypatch, jit_log):
    monkeypatch.setenv("KILN_DEBUG", "1")
    f = kiln.compile(_scaled_sum)
    w = kiln.randn(3, 2, requires_grad=True)
    f(kiln.randn(4, 3), w)
    f(kiln.randn(5, 3), w)
    messages = _messages(jit_log)
    traces = [m for m in messages if m.startswith("trace _scaled_sum:")]
    misses = [m for m in messages if m.startswith("cache miss")]
    passes = [m for m in messages if m.startswith("pass _scaled_sum")]
    assert len(traces) == 2 and "4 nodes" in traces[0]  # matmul, mul, add, sum
    # the same reasons explain() and stats.miss_reasons give
    assert misses == [f"cache miss #{i + 1} of _scaled_sum: " + "; ".join(r)
                      for i, r in enumerate(f.stats.miss_reasons)]
    assert "first call" in misses[0] and "shape (4, 3) -> (s0, 3)" in misses[1]  # the batch dim became dynamic
    assert any("forward ArithmeticElimination" in m and "add(x, 0) -> x" in m for m in passes)
    assert any(" backward " in m for m in passes)  # a training plan also times its backward passes
    assert all(m.endswith("ms") or "]" in m for m in passes)
    assert all(r.levelno == logging.DEBUG for r in jit_log.records if r.name == "kiln.jit")


def test_a_topic_list_logs_only_those_topics(monkeypatch, jit_log):
    monkeypatch.setenv("KILN_DEBUG", "miss")
    f = kiln.compile(lambda x: x.exp())
    f(kiln.ones(2))
    messages = _messages(jit_log)
    assert messages == ["cache miss #1 of <lambda>: first call"]


def test_the_kernels_topic_logs_each_fused_kernel_ir(monkeypatch, jit_log):
    from kiln.jit.backends import cpu  # noqa: PLC0415

    if not cpu.available():
        pytest.skip("the cpu backend's kernels need a C compiler")
    monkeypatch.setenv("KILN_DEBUG", "kernels")
    f = kiln.compile(lambda x, b: (x + b).relu(), backend="cpu")
    with kiln.no_grad():
        f(kiln.randn(8, 16), kiln.randn(16))
    messages = _messages(jit_log)
    assert len(messages) == 1 and messages[0].startswith("kernel IR:\nkernel fused[add -> relu] (elementwise)")
    assert "x1: float32 = in1[j]" in messages[0]  # the bias, read once per column


def test_unset_logs_nothing_and_hits_log_nothing(monkeypatch, jit_log):
    monkeypatch.delenv("KILN_DEBUG", raising=False)
    f = kiln.compile(lambda x: x + 1)
    x = kiln.ones(2)
    f(x)
    assert _messages(jit_log) == []
    monkeypatch.setenv("KILN_DEBUG", "1")
    f(x)  # a cache hit: nothing to say
    assert _messages(jit_log) == []
    assert f.stats.hits == 1


def test_the_variable_is_read_at_call_time(monkeypatch, jit_log):
    monkeypatch.setenv("KILN_DEBUG", "0")
    f = kiln.compile(lambda x: x * 3)
    f(kiln.ones(2))
    assert _messages(jit_log) == []
    monkeypatch.setenv("KILN_DEBUG", "trace")
    f(kiln.ones(3))  # a new shape: a miss and a trace, logged now that the variable is set
    assert [m.split(":")[0] for m in _messages(jit_log)] == ["trace <lambda>"]


def test_a_graph_break_is_named_in_the_trace_record(monkeypatch, jit_log):
    monkeypatch.setenv("KILN_DEBUG", "trace")

    def branchy(x):
        if x.sum().item() > 0:
            return x * 2
        return x

    f = kiln.compile(branchy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        f(kiln.ones(2))
    (message,) = _messages(jit_log)
    assert "graph break" in message and "runs eagerly" in message and "test_debug.py" in message


def test_module_state_writes_are_counted(monkeypatch, jit_log):
    monkeypatch.setenv("KILN_DEBUG", "trace")
    f = kiln.compile(kiln.nn.BatchNorm1d(3))
    with kiln.no_grad():
        f(kiln.randn(4, 3))
    (message,) = _messages(jit_log)
    assert message.startswith("trace BatchNorm1d:") and "3 state writes" in message


def test_djit_logs_each_new_structure(monkeypatch, jit_log):
    monkeypatch.setenv("KILN_DEBUG", "trace,miss")

    @kiln.djit
    def g(x):
        return x * 2 if x.sum().item() > 0 else x - 1

    g(kiln.ones(2))
    g(kiln.ones(2))
    messages = _messages(jit_log)
    # two graphs per call (x.sum() for .item(), then x * 2), each structure logged once, when new
    assert sum(m.startswith("trace g:") for m in messages) == 2
    assert [m for m in messages if m.startswith("cache miss")] == ["cache miss #1 of g: new graph structure",
                                                                     "cache miss #2 of g: new graph structure"]


def _run(code: str, env_value: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("KILN_DEBUG", None)
    if env_value is not None:
        env["KILN_DEBUG"] = env_value
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


_PROGRAM = """
import kiln
f = kiln.compile(lambda x: (x * 2).sum())
f(kiln.ones(3)); f(kiln.ones(3)); f(kiln.ones(4))
print("done")
"""


def test_stderr_output_in_a_fresh_process():
    on = _run(_PROGRAM, "1")
    assert on.returncode == 0, on.stderr
    assert on.stdout.strip() == "done"
    lines = on.stderr.splitlines()
    assert "[kiln.jit] cache miss #1 of <lambda>: first call" in lines
    assert "[kiln.jit] cache miss #2 of <lambda>: tensor leaf 0: shape (3,) -> (s0,)" in lines
    assert sum(line.startswith("[kiln.jit] trace <lambda>: ") for line in lines) == 2
    assert any(line.startswith("[kiln.jit] pass <lambda> forward DeadNodeElim: ") for line in lines)
    off = _run(_PROGRAM, None)
    assert off.returncode == 0 and "[kiln.jit]" not in off.stderr


def test_an_application_logging_setup_gets_each_record_once():
    code = "import logging; logging.basicConfig(format='APP %(name)s %(message)s')\n" + _PROGRAM
    out = _run(code, "miss")
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert lines.count("APP kiln.jit cache miss #1 of <lambda>: first call") == 1
    assert not any(line.startswith("[kiln.jit]") for line in lines)


def test_a_handler_on_the_kiln_jit_logger_replaces_the_stderr_output():
    code = ("import logging, sys\n"
            "h = logging.StreamHandler(sys.stdout); h.setFormatter(logging.Formatter('OWN %(message)s'))\n"
            "logging.getLogger('kiln.jit').addHandler(h)\n" + _PROGRAM)
    out = _run(code, "miss")
    assert out.returncode == 0, out.stderr
    assert "OWN cache miss #1 of <lambda>: first call" in out.stdout.splitlines()
    assert "[kiln.jit]" not in out.stderr
