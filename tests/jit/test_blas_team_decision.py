"""The once-per-process decision of whether OpenBLAS runs on kiln's team (cpu/blas_team.py) is the same for every
thread that asks, and so a compiled training step renders the same source in every process.

The forward and the backward of a compiled step are lowered in two threads at once (jit/build.py). Each plan's
source says whether its kernels run serially, from `blas_team.share()`; if the thread that asked second got an
answer before the first had decided, one plan came out serial in some processes and not in others, so a new
process missed the kernel cache about half the time (300 ms of compiling on a warm cache) and ran that plan
on one thread.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from kiln.jit.backends import cpu
from kiln.jit.backends.cpu import blas_team


def test_threads_asking_while_one_decides_wait_for_its_answer(monkeypatch):
    monkeypatch.setattr(blas_team, "_state", {})
    started, calls = threading.Event(), []

    def slow_decide() -> bool:
        calls.append(threading.current_thread().name)
        started.set()
        time.sleep(0.2)  # building the callback library takes a compile
        assert blas_team.share() is False  # the deciding thread asking again (a library built on the way)
        return True

    monkeypatch.setattr(blas_team, "_decide", slow_decide)
    answers: dict[str, bool] = {}

    def ask(name: str) -> None:
        answers[name] = blas_team.share()

    first = threading.Thread(target=ask, args=("first",))
    first.start()
    assert started.wait(5)
    second = threading.Thread(target=ask, args=("second",))
    second.start()
    first.join(5)
    second.join(5)
    assert answers == {"first": True, "second": True} and len(calls) == 1
    assert blas_team.share() is True and blas_team.shared()


def test_a_failed_decision_is_not_half_made(monkeypatch):
    monkeypatch.setattr(blas_team, "_state", {})

    def broken() -> bool:
        raise RuntimeError("boom")

    monkeypatch.setattr(blas_team, "_decide", broken)
    with pytest.raises(RuntimeError):
        blas_team.share()
    monkeypatch.setattr(blas_team, "_decide", lambda: False)
    assert blas_team.share() is False and "deciding" not in blas_team._state


STEP = r"""
import hashlib, json
import numpy as np
import kiln
from kiln.models import mlp
kiln.manual_seed(0)
model = mlp(784, (256, 256), 10)  # GEMMs large enough for OpenBLAS to thread (segcode.blas_may_thread)
opt = kiln.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = kiln.tensor(np.random.default_rng(0).standard_normal((128, 784)).astype(np.float32))
y = kiln.tensor(np.arange(128) % 10)
run = kiln.compile(model, backend="cpu")
opt.zero_grad()
kiln.functional.cross_entropy(run(x), y).backward()
opt.step()
print(json.dumps(sorted(hashlib.sha256(s.encode()).hexdigest() for s in SOURCES)))
"""

RECORD = r"""
from kiln.jit.backends.cpu import toolchain
SOURCES = []
_build = toolchain.build
def build(source, symbol=None):
    SOURCES.append(source)
    return _build(source, symbol)
toolchain.build = build
"""


@pytest.mark.skipif(not cpu.available(), reason="no C compiler for native plans")
def test_every_process_renders_the_same_sources_for_a_compiled_step(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(KILN_CACHE_DIR=str(tmp_path), OPENBLAS_NUM_THREADS="2")
    seen = []
    for _ in range(4):  # the race lost about one process in two
        run = subprocess.run([sys.executable, "-c", RECORD + STEP], env=env, capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        seen.append(json.loads(run.stdout.strip().splitlines()[-1]))
    assert all(sources == seen[0] for sources in seen), "a process rendered different kernel sources"
