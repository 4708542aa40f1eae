"""Acceptance 8 and 10: symbolic batch dims share one plan; concurrent calls equal eager."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.models import mlp

from jit_helpers import assert_close


def test_dynamic_batch_dim_gives_one_miss_and_correct_results():
    kiln.manual_seed(0)
    model = mlp(12, (16,), 5)
    f = kiln.compile(model, dynamic_dims={0: {0: "B"}})
    for batch in (2, 5, 17):
        x = kiln.randn(batch, 12)
        assert_close(f(x), model(x))
    assert f.stats.misses == 1 and f.stats.hits == 2


def test_dynamic_dims_training_with_mean_loss_and_grads():
    kiln.manual_seed(1)
    model = mlp(6, (8,), 3)

    def step(x, y):
        return nn.functional.cross_entropy(model(x), y)

    f = kiln.compile(step, dynamic_dims={0: {0: "B"}, 1: {0: "B"}})
    for batch in (3, 7, 4):
        x, y = kiln.randn(batch, 6), kiln.randint(0, 3, (batch,))
        model.zero_grad()
        step(x, y).backward()
        want = [p.grad.numpy().copy() for p in model.parameters()]
        model.zero_grad()
        loss = f(x, y)
        assert_close(loss, step(x, y))
        loss.backward()
        for p, w in zip(model.parameters(), want):
            np.testing.assert_allclose(p.grad.numpy(), w, rtol=1e-5, atol=1e-6)
    assert f.stats.misses == 1


def test_shape_arithmetic_on_symbolic_dims():
    def fn(x):
        b = x.shape[0]
        doubled = kiln.cat([x, x], 0).view(b * 2, -1)
        return doubled.reshape(b, -1).mean(0)

    f = kiln.compile(fn, dynamic_dims={0: {0: "B"}})
    for batch in (2, 3, 9):
        x = kiln.randn(batch, 4)
        assert_close(f(x), fn(x))
    assert f.stats.misses == 1
    assert "B" in str(f.graphs()[0])


@pytest.mark.parametrize("spec", ["batch", [0], {0: [0]}, {0: {0: 1}}])
def test_bad_dynamic_dims_spec_raises_value_error(spec):
    with pytest.raises(ValueError):
        kiln.compile(lambda x: x, dynamic_dims=spec)


def test_dynamic_dims_index_out_of_range_raises_value_error():
    f = kiln.compile(lambda x: x + 1, dynamic_dims={3: {0: "B"}})
    with pytest.raises(ValueError, match="argument 3"):
        f(kiln.ones(2))


def test_eight_threads_with_different_batch_sizes_equal_eager():
    kiln.manual_seed(0)
    model = mlp(10, (12,), 4)
    model.eval()
    f = kiln.compile(model)
    inputs = {n: kiln.randn(n, 10) for n in (1, 2, 3, 4)}
    with kiln.no_grad():
        expected = {n: model(x).numpy().copy() for n, x in inputs.items()}
    errors: list[str] = []

    def worker(tid: int) -> None:
        with kiln.no_grad():
            for i in range(40):
                n = 1 + (tid + i) % 4
                got = f(inputs[n]).numpy()
                if not np.allclose(got, expected[n], rtol=1e-5, atol=1e-6):
                    errors.append(f"thread {tid} call {i} batch {n}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert f.stats.hits + f.stats.misses + f.stats.fallbacks == 8 * 40


def test_symbolic_slice_bounds_follow_the_batch():
    f = kiln.compile(lambda x: x[: x.shape[0] // 2], dynamic_dims={0: {0: "n"}})
    for n in (4, 8, 10):
        x = kiln.randn(n, 2)
        assert_close(f(x), x[: n // 2])
    assert f.stats.misses == 1


def test_gpt_with_dynamic_batch_and_sequence_length():
    from kiln.models import gpt

    kiln.manual_seed(0)
    model = gpt(vocab=20, n_layer=1, n_head=2, d_model=8, block_size=8).eval()
    f = kiln.compile(model, dynamic_dims={0: {0: "B", 1: "T"}})
    with kiln.no_grad():
        for b, t in ((2, 5), (3, 7), (4, 2)):  # sizes >= 2: a size-1 dim gets its own plan
            idx = kiln.randint(0, 20, (b, t))
            assert_close(f(idx), model(idx))
    assert f.stats.misses == 1


def test_max_with_dim_returns_fresh_values_and_indices():
    f = kiln.compile(lambda x: x.max(1))
    for v in (1.0, 5.0):
        out = f(kiln.full((2, 3), v))
        assert type(out).__name__ == "_MaxResult"
        np.testing.assert_allclose(out.values.numpy(), v)
