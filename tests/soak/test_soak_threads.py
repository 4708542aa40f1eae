"""Load: 8 threads x 500 calls on shared compiled modules with mixed batch sizes, every result
checked against eager references computed beforehand."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln
from kiln import nn

THREADS = 8
CALLS = 500
BATCHES = (1, 2, 3, 5, 8)


def _mlp(seed: int) -> nn.Module:
    kiln.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))


def test_eight_threads_share_a_training_and_an_eval_module():
    train_model, eval_model = _mlp(1), _mlp(2)
    eval_model.eval()
    train_c = kiln.compile(train_model, max_cache_entries=16, dynamic=False)  # a plan per batch size
    eval_c = kiln.compile(eval_model, max_cache_entries=16, dynamic=False)
    inputs = {n: kiln.randn(n, 6) for n in BATCHES}

    # eager references: outputs of both models, and the training model's input gradient
    ref_train, ref_grad, ref_eval = {}, {}, {}
    for n, x in inputs.items():
        xr = x.detach().requires_grad_()
        out = train_model(xr)
        (gx,) = kiln.autograd.grad((out * out).sum(), xr)
        ref_train[n], ref_grad[n] = out.detach().numpy().copy(), gx.numpy().copy()
        with kiln.no_grad():
            ref_eval[n] = eval_model(x).numpy().copy()

    errors: list[str] = []
    start = threading.Barrier(THREADS)

    def worker(tid: int) -> None:
        start.wait()
        try:
            for i in range(CALLS):
                n = BATCHES[(tid * 7 + i * 3) % len(BATCHES)]
                x = inputs[n]
                if (tid + i) % 2:
                    xr = x.detach().requires_grad_()
                    out = train_c(xr)
                    (gx,) = kiln.autograd.grad((out * out).sum(), xr)
                    if not np.allclose(out.detach().numpy(), ref_train[n], rtol=1e-5, atol=1e-6):
                        errors.append(f"thread {tid} call {i}: train output, batch {n}")
                    if not np.allclose(gx.numpy(), ref_grad[n], rtol=1e-4, atol=1e-6):
                        errors.append(f"thread {tid} call {i}: input grad, batch {n}")
                else:
                    with kiln.no_grad():  # grad mode is per thread
                        got = eval_c(x).numpy()
                    if not np.allclose(got, ref_eval[n], rtol=1e-5, atol=1e-6):
                        errors.append(f"thread {tid} call {i}: eval output, batch {n}")
                    if not kiln.is_grad_enabled():
                        errors.append(f"thread {tid}: grad mode leaked out of no_grad")
        except Exception as exc:  # noqa: BLE001 - reported below with the thread id
            errors.append(f"thread {tid} raised {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:10]

    for f in (train_c, eval_c):
        s = f.stats
        assert s.hits + s.misses + s.fallbacks == THREADS * CALLS // 2, s
        assert s.misses == len(BATCHES) and s.fallbacks == 0, s  # one plan per batch size, none twice
        assert s.cache_size == len(BATCHES) and s.evictions == 0
    assert all(p.grad is None for p in train_model.parameters())  # autograd.grad leaves .grad alone


@pytest.mark.filterwarnings("ignore:kiln.compile.*recompiled:RuntimeWarning")  # more shapes than entries
def test_threads_with_different_shapes_on_one_compiled_function_and_kept_outputs():
    w = kiln.randn(4, 4)
    f = kiln.compile(lambda x: (x @ w).tanh() + x.sum(), max_cache_entries=4, dynamic=False)
    shapes = [(1, 4), (2, 4), (3, 4), (4, 4), (2, 3, 4), (5, 4)]  # more shapes than cache entries
    inputs = {s: kiln.randn(*s) for s in shapes}
    with kiln.no_grad():
        expected = {s: ((x @ w).tanh() + x.sum()).numpy().copy() for s, x in inputs.items()}
    kept: list = []
    lock = threading.Lock()

    def worker(tid: int) -> None:
        mine = []
        with kiln.no_grad():
            for i in range(CALLS):
                s = shapes[(tid + i) % len(shapes)]
                mine.append((s, f(inputs[s])))
        with lock:
            kept.extend(mine)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(kept) == THREADS * CALLS
    bad = [s for s, out in kept if not np.allclose(out.numpy(), expected[s], rtol=1e-5, atol=1e-6)]
    assert not bad, f"{len(bad)} kept outputs differ from eager, e.g. shape {bad[0]}"
    s = f.stats
    assert s.hits + s.misses + s.fallbacks == THREADS * CALLS
    assert s.evictions == s.misses - s.cache_size and s.cache_size == 4
