"""Acceptance 3-4: cache hits and misses per key field, eviction order, invalidation, fresh params."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln import nn

from jit_helpers import assert_close


def _fn(x, y):
    return x * 2 + y


def test_second_call_hits():
    f = kiln.compile(_fn)
    x, y = kiln.randn(3), kiln.randn(3)
    f(x, y)
    out = f(x, y)
    assert (f.stats.hits, f.stats.misses, f.stats.traces) == (1, 1, 1)
    assert_close(out, _fn(x, y))


@pytest.mark.parametrize("change", ["shape", "dtype", "requires_grad", "static", "dict_keys", "aliasing"])
def test_each_key_field_misses(change):
    def g(a, b, scale=1.0, extra=None):
        out = a * scale + b
        if extra:
            for v in extra.values():
                out = out + v
        return out

    f = kiln.compile(g)
    a, b = kiln.randn(4), kiln.randn(4)
    base = dict(scale=2.0, extra={"u": kiln.randn(4)})
    f(a, b, **base)
    if change == "shape":
        args, kw = (kiln.randn(5), kiln.randn(5)), dict(scale=2.0, extra={"u": kiln.randn(5)})
    elif change == "dtype":
        args, kw = (a.double(), b.double()), dict(scale=2.0, extra={"u": kiln.randn(4).double()})
    elif change == "requires_grad":
        args, kw = (a.detach().requires_grad_(), b), base
    elif change == "static":
        args, kw = (a, b), dict(scale=3.0, extra=base["extra"])
    elif change == "dict_keys":
        args, kw = (a, b), dict(scale=2.0, extra={"u": kiln.randn(4), "v": kiln.randn(4)})
    else:
        args, kw = (a, a), base  # the same tensor twice
    out = f(*args, **kw)
    assert f.stats.misses == 2, f.explain()
    assert_close(out, g(*args, **kw))
    assert f.stats.miss_reasons[-1] != ["first call"]


def test_aliasing_pattern_is_part_of_the_key():
    def h(x, y):
        x.add_(1.0)
        return x + y

    f = kiln.compile(h)
    a = kiln.zeros(3)
    out = f(a, a)  # x and y alias: eager gives (a+1) + (a+1)
    np.testing.assert_allclose(out.numpy(), [2.0, 2.0, 2.0])
    b, c = kiln.zeros(3), kiln.zeros(3)
    out = f(b, c)
    np.testing.assert_allclose(out.numpy(), [1.0, 1.0, 1.0])
    assert f.stats.misses == 2


def test_grad_mode_and_training_mode_get_separate_plans():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    f = kiln.compile(model)
    x = kiln.randn(2, 4)
    f(x)
    with kiln.no_grad():
        f(x)
    model.eval()
    f(x)
    model.train()
    f(x)
    assert f.stats.misses == 3 and f.stats.hits == 1


@pytest.mark.parametrize("eviction,expected", [("lru", [1, 3]), ("fifo", [2, 3])])
def test_eviction_order(eviction, expected):
    f = kiln.compile(lambda x: x + 1, max_cache_entries=2, eviction=eviction, dynamic=False)
    xs = {n: kiln.randn(n) for n in (1, 2, 3)}
    f(xs[1])
    f(xs[2])
    f(xs[1])  # a hit: refreshes size 1 under LRU, not under FIFO
    with pytest.warns(RuntimeWarning, match="has recompiled 3 times because dimension 0"):
        f(xs[3])  # evicts size 2 (LRU) or size 1 (FIFO)
    sizes = sorted(k.tensors[0][1][0] for k in f._cache.keys())
    assert sizes == expected
    assert f.stats.evictions == 1 and f.stats.cache_size == 2


def test_max_cache_size_alias():
    f = kiln.compile(lambda x: x + 1, max_cache_size=1)
    f(kiln.randn(1))
    with pytest.warns(RuntimeWarning, match="has recompiled 2 times"):
        f(kiln.randn(2))
    assert f.stats.cache_size == 1 and f.stats.evictions == 1


def test_invalidate_cache_forces_retrace():
    f = kiln.compile(_fn)
    x = kiln.randn(3)
    f(x, x)
    f(x, x)
    f.invalidate_cache()
    f(x, x)
    assert f.stats.traces == 2 and f.stats.cache_size == 1


def test_optimizer_step_is_seen_without_retrace():
    model = nn.Linear(3, 2)
    f = kiln.compile(model)
    opt = kiln.optim.SGD(model.parameters(), lr=0.5)
    x = kiln.randn(4, 3)
    first = f(x)
    first.sum().backward()
    opt.step()
    second = f(x)
    assert not np.allclose(first.detach().numpy(), second.detach().numpy())
    assert_close(second, model(x))
    assert f.stats.traces == 1


def test_replacing_a_parameter_retraces():
    model = nn.Linear(3, 2)
    f = kiln.compile(model)
    x = kiln.randn(4, 3)
    f(x)
    model.weight = nn.Parameter(kiln.zeros(2, 3))
    out = f(x)
    assert f.stats.traces == 2
    assert_close(out, model(x))
    assert any("structure" in r for r in f.stats.miss_reasons[-1])


def test_closure_tensor_mutated_in_place_is_read_fresh():
    w = kiln.ones(3)
    f = kiln.compile(lambda x: x * w)
    x = kiln.ones(3)
    f(x)
    w.mul_(5.0)
    np.testing.assert_allclose(f(x).numpy(), [5.0, 5.0, 5.0])


def test_recompile_warning_names_the_changing_dimension():
    f = kiln.compile(lambda x: x.sum(0), max_cache_entries=2, dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 6):
            f(kiln.randn(n, 3))
    messages = [str(w.message) for w in caught]
    assert any("dimension 0 of argument 0" in m and "dynamic_dims" in m for m in messages), messages


def test_explain_names_the_changed_field():
    f = kiln.compile(_fn, dynamic=False)
    f(kiln.randn(3), kiln.randn(3))
    f(kiln.randn(4), kiln.randn(4))
    text = f.explain()
    assert "first call" in text and "shape (3,) -> (4,)" in text
    assert "DeadNodeElim" in text
