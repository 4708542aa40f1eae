"""kiln.djit records ops and runs them as compiled plans where Python needs a value (kiln/jit/lazy.py).

Every test compares with the same function run eagerly, on the same inputs: outputs, gradients,
RNG streams, in-place writes and aliasing, and where errors are raised.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln.jit.backends.cpu import runtime
from kiln.ops.pending import PendingArray

nn = kiln.nn
F = kiln.nn.functional


def _mlp() -> nn.Module:
    kiln.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3)).double()


def _branchy(model):
    def f(x):
        h = model[2](model[1](model[0](x)))
        if h.sum() > 0:  # data-dependent Python
            h = h * 0.5
        else:
            h = h - 1.0
        return F.softmax(model[4](model[3](h)), -1)
    return f


def _x(seed: int, scale: float = 1.0) -> kiln.Tensor:
    return kiln.tensor(np.random.default_rng(seed).standard_normal((4, 8)) * scale)


def test_a_branching_function_gives_eagers_bits_on_both_paths_and_compiles_each_structure():
    model = _mlp()
    eager, lazy = _branchy(model), kiln.djit(_branchy(model))
    inputs = [_x(seed, 20.0) for seed in range(6)]
    with kiln.no_grad():
        paths = [float(model[2](model[1](model[0](x))).sum()) > 0 for x in inputs]
        assert set(paths) == {True, False}
        for x in inputs * 2:
            want = eager(x)
            got = lazy(x)
            assert isinstance(got._data, np.ndarray)  # nothing pending leaves the call
            assert np.array_equal(got.numpy(), want.numpy())
    s = lazy.stats
    assert s.traces == 12 and s.misses == 3 and s.hits == 21 and s.cache_size == 3
    compiled = [p for p in lazy._segments.plans.values() if isinstance(p, runtime.NativePlan)]
    assert len(compiled) == 3  # every structure seen twice runs generated code


def test_a_compiled_structure_expects_the_layouts_its_inputs_had():
    """A realized graph whose input is a transposed weight (``x @ w.T``) gets a native plan that reads it so from
    its first replay: no call misses its layout, and no second variant is generated."""
    w = kiln.randn(24, 16)
    f = kiln.djit(lambda x: (x @ w.T).relu() * 2.0)
    with kiln.no_grad():
        for seed in range(4):
            x = kiln.tensor(np.random.default_rng(seed).standard_normal((4, 16)).astype(np.float32))
            assert np.array_equal(f(x).numpy(), ((x @ w.T).relu() * 2.0).numpy())
    (plan,) = [p for p in f._segments.plans.values() if isinstance(p, runtime.NativePlan)]
    assert plan.observed_calls == 0 and len(plan.variants) == 1 and plan.fallback_calls == 0


def test_a_structure_seen_once_is_interpreted_not_compiled():
    f = kiln.djit(lambda x: (x * 2).sum())
    f(kiln.ones(3))
    assert f.stats.total_compile_time_ms == 0.0
    (entry,) = f._segments.plans.values()
    assert isinstance(entry, kiln.jit.Graph)
    f(kiln.ones(3))
    (entry,) = f._segments.plans.values()
    assert isinstance(entry, runtime.NativePlan)


def test_shape_queries_do_not_run_anything_and_values_do():
    seen = []

    @kiln.djit
    def f(x):
        y = x * 2
        seen.append((tuple(y.shape), y.dtype, len(y), y.ndim, isinstance(y._data, PendingArray)))
        z = y + y.shape[0]
        first = float(z[0, 0])  # a value: runs what is pending
        seen.append(isinstance(y._data, PendingArray))
        return z * first

    x = kiln.tensor([[1.0, 2.0], [3.0, 4.0]])
    out = f(x)
    assert seen == [((2, 2), kiln.float32, 2, 2, True), False]
    np.testing.assert_array_equal(out.numpy(), (x.numpy() * 2 + 2) * 4.0)
    assert f.stats.misses == 2  # the graph up to float(), then the rest


def test_python_side_effects_run_on_every_call():
    calls = []

    @kiln.djit
    def f(x):
        calls.append(1)
        return x + 1

    for _ in range(3):
        f(kiln.ones(2))
    assert len(calls) == 3


def test_random_ops_draw_eagers_stream_in_program_order():
    def f(x):
        a = F.dropout(x * 2, 0.5, training=True)
        b = kiln.randn(3, 4)
        return a + b, kiln.rand(2)

    lazy = kiln.djit(f)
    x = kiln.ones(3, 4)
    for seed in (0, 1):
        kiln.manual_seed(seed)
        want = [t.numpy().copy() for t in f(x)] + [kiln.rand(1).numpy()]
        kiln.manual_seed(seed)
        got = [t.numpy().copy() for t in lazy(x)] + [kiln.rand(1).numpy()]
        for a, b in zip(got, want):
            assert np.array_equal(a, b)


def test_gradients_match_eager():
    model = _mlp()
    eager, lazy = _branchy(model), kiln.djit(_branchy(model))
    for x in (_x(0, 20.0), _x(1, 20.0), _x(3, 20.0)):
        model.zero_grad()
        (eager(x) * kiln.arange(3.0).double()).sum().backward()
        want = [p.grad.numpy().copy() for p in model.parameters()]
        model.zero_grad()
        (lazy(x) * kiln.arange(3.0).double()).sum().backward()
        for p, w in zip(model.parameters(), want):
            assert np.array_equal(p.grad.numpy(), w)


def test_in_place_writes_and_views_behave_as_in_eager():
    def f(x, buf):
        h = x * 3
        row = h[0]          # a view of a pending result
        h.add_(1)           # written in place: the view sees it
        buf.mul_(2)         # an argument written in place
        col = buf[:, 1]
        buf[0, 0] = h.sum()
        return row, col, h

    lazy = kiln.djit(f)
    for _ in range(2):
        x = kiln.arange(6.0).reshape(2, 3)
        want_buf, got_buf = kiln.ones(2, 2), kiln.ones(2, 2)
        want = f(x, want_buf)
        got = lazy(x, got_buf)
        for a, b in zip(got, want):
            assert np.array_equal(a.numpy(), b.numpy())
        assert np.array_equal(got_buf.numpy(), want_buf.numpy())
        row, col, h = got
        h.add_(10)  # the returned view still shares memory with its base, as in eager
        assert np.array_equal(row.numpy(), h[0].numpy())
        got_buf.zero_()
        assert not col.numpy().any()


def test_errors_are_raised_where_eager_raises_them():
    emb = nn.Embedding(5, 2)
    reached = []

    @kiln.djit
    def f(idx):
        h = emb(idx)         # the index check runs at once
        reached.append(True)
        return h * 2

    with pytest.raises(IndexError):
        f(kiln.tensor([1, 7]))
    assert reached == []
    with pytest.raises(kiln.ShapeError if hasattr(kiln, "ShapeError") else ValueError):
        kiln.djit(lambda a, b: a @ b)(kiln.ones(2, 3), kiln.ones(2, 3))
    np.testing.assert_array_equal(f(kiln.tensor([1, 4])).detach().numpy(), emb(kiln.tensor([1, 4])).detach().numpy() * 2)


def test_pending_results_stored_elsewhere_are_computed_by_the_return():
    store = {}

    @kiln.djit
    def f(x):
        store["half"] = x / 2
        return [x + 1, {"sq": x * x}]

    out = f(kiln.tensor([2.0, 4.0]))
    assert out[0].tolist() == [3.0, 5.0] and out[1]["sq"].tolist() == [4.0, 16.0]
    assert isinstance(store["half"]._data, np.ndarray) and store["half"].tolist() == [1.0, 2.0]


def test_a_compiled_function_inside_a_djit_call_runs_on_real_inputs():
    inner = kiln.compile(lambda a: a.exp() + 1)

    @kiln.djit
    def f(x):
        return inner(x * 2) - 1

    x = kiln.tensor([0.0, 0.5])
    for _ in range(2):
        np.testing.assert_allclose(f(x).numpy(), np.exp(x.numpy() * 2), rtol=1e-6)


def test_an_exception_leaves_nothing_recorded():
    @kiln.djit
    def f(x):
        y = x + 1
        raise KeyError("user error")

    with pytest.raises(KeyError):
        f(kiln.ones(2))
    assert (kiln.ones(2) * 3).tolist() == [3.0, 3.0]  # eager again
    assert kiln.ops.primitive.trace_state.lazy is None


def test_eager_code_after_a_djit_call_is_not_recorded():
    f = kiln.djit(lambda x: x * 2)
    y = f(kiln.ones(2))
    z = y + 1
    assert isinstance(z._data, np.ndarray) and z.tolist() == [3.0, 3.0]


def test_a_branch_inside_a_hot_loop_warns_once_naming_its_line():
    @kiln.djit
    def countdown(x):
        steps = 0
        while x.sum() > 0:  # a value Python needs at every turn
            x = x - 1
            steps += 1
        return x, steps

    with pytest.warns(RuntimeWarning, match=r"test_lazy_djit.py:\d+.*every turn") as caught:
        out, steps = countdown(kiln.tensor([40.0]))
    assert steps == 40 and out.tolist() == [0.0]
    assert sum("kiln.djit(countdown)" in str(w.message) for w in caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per function
        countdown(kiln.tensor([40.0]))
        kiln.djit(lambda x: x.sum() > 0 and x * 2)(kiln.ones(2))  # a few realizations: no warning
