"""Measurements made in fresh processes: the first call of a compiled MLP training step with a
cold and with a warm kernel cache, and the peak memory of eager and compiled training.

Each runs `python -c <script>` with a private KILN_CACHE_DIR, so nothing this process has
compiled or imported is reused, and reads one JSON line back.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

_SETUP = """
import json, time, tracemalloc
import numpy as np
import kiln
from kiln.models import mlp
kiln.manual_seed(0)
model = mlp(784, (256, 256), 10)
opt = kiln.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
rng = np.random.default_rng(0)
x = kiln.tensor(rng.standard_normal((128, 784)).astype(np.float32))
y = kiln.tensor(rng.integers(0, 10, 128))
run = kiln.compile(model) if COMPILED else model
def step():
    opt.zero_grad()
    kiln.functional.cross_entropy(run(x), y).backward()
    opt.step()
"""

_FIRST_CALL = _SETUP + """
start = time.perf_counter()
step()
print(json.dumps({"seconds": time.perf_counter() - start}))
"""

_PEAK_MEMORY = _SETUP + """
for _ in range(3):
    step()
kiln.jit.wait_for_builds()
step()  # the generated code's first step (it makes the thread's arena): the steps below are steady
tracemalloc.start()
base = tracemalloc.get_traced_memory()[0]
for _ in range(3):
    step()
print(json.dumps({"bytes": tracemalloc.get_traced_memory()[1] - base}))
"""


def _run(script: str, cache_dir: str, compiled: bool) -> dict:
    env = dict(os.environ, KILN_CACHE_DIR=cache_dir)
    code = f"COMPILED = {compiled!r}\n" + script
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark subprocess failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def first_call_seconds() -> tuple[float, float]:
    """(cold, warm): the first compiled MLP training step in a new process with an empty kernel
    cache, then in another new process that finds the first one's kernels on disk."""
    with tempfile.TemporaryDirectory(prefix="kiln-bench-cache-") as cache:
        cold = _run(_FIRST_CALL, cache, compiled=True)["seconds"]
        warm = _run(_FIRST_CALL, cache, compiled=True)["seconds"]
    return cold, warm


def peak_training_bytes() -> tuple[int, int]:
    """(eager, compiled): the peak memory NumPy and Python allocate during three MLP training
    steps at batch 128 (after three warm-up steps), above what was live before them."""
    with tempfile.TemporaryDirectory(prefix="kiln-bench-cache-") as cache:
        eager = _run(_PEAK_MEMORY, cache, compiled=False)["bytes"]
        compiled = _run(_PEAK_MEMORY, cache, compiled=True)["bytes"]
    return eager, compiled
