"""Soak: thousands of compiled calls with a small cache. Memory stays flat, evictions free their
plans, and the statistics add up. Tensors are tiny so the time goes into the compiler itself."""
from __future__ import annotations

import gc
import os
import random
import sys
import tracemalloc
import warnings
import weakref

import numpy as np

import kiln
from kiln import nn

CALLS = 5_000
SIZES = list(range(1, 51))
CACHE = 8


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def settle() -> int:
    """Collect garbage and return the interpreter's count of allocated memory blocks."""
    gc.collect()
    gc.collect()
    return sys.getallocatedblocks()


def _fn(x, y):
    return (x * 2 + y).relu() - y * 0.5


def _refs(entry) -> list:
    refs = [weakref.ref(entry), weakref.ref(entry.graph)]
    plan = getattr(entry, "plan", None)
    if plan is not None:
        refs.append(weakref.ref(plan))
    return refs


def test_five_thousand_calls_fifty_sizes_cache_of_eight():
    f = kiln.compile(_fn, max_cache_entries=CACHE, dynamic=False)  # a plan per size: the cache churns
    inputs = {n: (kiln.ones(n), kiln.full((n,), -1.0)) for n in SIZES}
    expected = {n: _fn(*inputs[n]).numpy().copy() for n in SIZES}
    rng = random.Random(1234)
    evicted_refs: list = []
    warm = 1_000
    traced_from = CALLS - 2_000  # tracemalloc is slow: it watches the last 2,000 calls
    with warnings.catch_warnings(), kiln.no_grad():
        warnings.simplefilter("ignore", RuntimeWarning)  # "mark it dynamic" advice
        for i in range(CALLS):
            n = rng.choice(SIZES)
            out = f(*inputs[n])
            if i % 97 == 0:
                np.testing.assert_array_equal(out.numpy(), expected[n])
            if i == warm:
                blocks0, rss0 = settle(), rss_bytes()
            if i in (1_500, 2_000, 2_500):  # remember today's plans; later calls evict them
                evicted_refs.extend(r for e in f.cache_entries for r in _refs(e))
            if i == traced_from:
                settle()
                tracemalloc.start()
                traced0 = tracemalloc.get_traced_memory()[0]
        settle()
        traced_growth = tracemalloc.get_traced_memory()[0] - traced0
        tracemalloc.stop()
    blocks_growth, rss_growth = settle() - blocks0, rss_bytes() - rss0

    s = f.stats
    assert s.hits + s.misses + s.fallbacks == CALLS
    assert s.fallbacks == 0 and s.misses > 3_000 and s.hits > 500
    assert s.cache_size == len(f.cache_entries) == CACHE
    assert s.evictions == s.misses - s.cache_size
    assert s.traces == s.misses

    # bounded logs and allocator caches move by ~300 KiB; the leaks this guards against grew by MiBs
    assert traced_growth < 768 * 1024, f"{traced_growth} bytes still allocated after 2,000 calls"
    assert blocks_growth < 5_000, f"{blocks_growth} more memory blocks after {CALLS - warm} calls"
    assert rss_growth < 32 * 1024 * 1024, f"RSS grew by {rss_growth / 2**20:.1f} MiB"
    live = {id(r()) for e in f.cache_entries for r in _refs(e)}  # a plan can be cached again later
    still = [r() for r in evicted_refs if r() is not None and id(r()) not in live]
    assert not still, f"{len(still)} evicted entries, graphs or plans are still alive"
    assert sum(r() is None for r in evicted_refs) >= len(evicted_refs) - len(live) > 0
    assert len(f.explain()) < 500_000  # the history is bounded too


def test_every_call_a_new_shape_keeps_memory_flat():
    """No per-key bookkeeping (pass logs, miss reasons, history) outlives the cache."""
    f = kiln.compile(lambda x: x.exp().sum(0), max_cache_entries=4, dynamic=False)
    with warnings.catch_warnings(), kiln.no_grad():
        warnings.simplefilter("ignore", RuntimeWarning)
        for n in range(1, 301):
            f(kiln.ones(n, 2))
        blocks0 = settle()
        tracemalloc.start()
        traced0 = tracemalloc.get_traced_memory()[0]
        for n in range(301, 1_301):
            f(kiln.ones(n, 2))
        settle()
        traced_growth = tracemalloc.get_traced_memory()[0] - traced0
        tracemalloc.stop()
    blocks_growth = settle() - blocks0
    assert f.stats.misses == 1_300 and f.stats.cache_size == 4
    assert traced_growth < 512 * 1024, f"{traced_growth} bytes retained by 1,000 distinct signatures"
    assert blocks_growth < 2_000, blocks_growth


def test_training_plans_soak_memory_flat_and_grads_right():
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    f = kiln.compile(lambda x: model(x).pow(2).mean(), max_cache_entries=4)
    batches = {n: kiln.randn(n, 3) for n in range(1, 13)}
    want = {}
    for n, x in batches.items():
        model.zero_grad()
        model(x).pow(2).mean().backward()
        want[n] = [p.grad.numpy().copy() for p in model.parameters()]
    rng = random.Random(7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for i in range(2_000):
            n = rng.choice(list(batches))
            model.zero_grad()
            f(batches[n]).backward()
            if i % 50 == 0:
                for p, w in zip(model.parameters(), want[n]):
                    np.testing.assert_allclose(p.grad.numpy(), w, rtol=1e-5, atol=1e-7)
            if i == 500:
                blocks0 = settle()
    blocks_growth = settle() - blocks0
    s = f.stats
    assert s.hits + s.misses == 2_000 and s.evictions == s.misses - s.cache_size
    assert blocks_growth < 3_000, blocks_growth


def _sometimes_data_dependent(x):
    if x.shape[0] % 5 == 0 and float(x.sum()) > 0:  # a graph break for every fifth size
        return x * 3
    return x * 2


def test_mixed_plans_and_fallbacks_stats_add_up():
    f = kiln.compile(_sometimes_data_dependent, max_cache_entries=CACHE, dynamic=False)
    inputs = {n: kiln.ones(n) for n in SIZES}
    rng = random.Random(99)
    calls = 3_000
    with warnings.catch_warnings(), kiln.no_grad():
        warnings.simplefilter("ignore", RuntimeWarning)
        for i in range(calls):
            n = rng.choice(SIZES)
            out = f(inputs[n])
            assert float(out[0]) == (3.0 if n % 5 == 0 else 2.0)
    s = f.stats
    assert s.hits + s.misses + s.fallbacks == calls
    assert s.fallbacks > 0 and s.hits > 0
    assert s.evictions == s.misses - s.cache_size and s.cache_size == CACHE
    assert sum(e.kind == "fallback" for e in f.cache_entries) <= CACHE
