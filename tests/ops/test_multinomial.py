"""kiln.multinomial: the distribution it samples (checked against exact probabilities), reproducibility
with kiln.manual_seed and generators, compiled == eager, and clear errors.

PyTorch draws from another random stream, so no sample-by-sample comparison exists; the
oracle is probability: frequencies within a few standard errors of the exact values.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import kiln
from kiln.jit import GraphBreakError
from kiln.ops.multinomial import MultinomialWeightsError

WEIGHTS = np.array([0.1, 0.0, 0.25, 0.4, 0.25], np.float32)


def _assert_frequencies(samples: np.ndarray, expected: dict, draws: int) -> None:
    """Each outcome's frequency within 5 standard errors of its probability (a false alarm ~1e-6)."""
    counts = {}
    for s in map(tuple, samples.reshape(draws, -1)):
        counts[s] = counts.get(s, 0) + 1
    assert set(counts) <= {k for k, p in expected.items() if p > 0}, set(counts) - set(expected)
    for outcome, p in expected.items():
        freq = counts.get(outcome, 0) / draws
        assert abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / draws) + 1e-12, (outcome, freq, p)


def test_with_replacement_each_draw_follows_the_weights():
    kiln.manual_seed(1)
    rows = 4000
    samples = kiln.multinomial(kiln.tensor(np.tile(WEIGHTS * 3.0, (rows, 1))), 3, replacement=True).numpy()
    assert samples.shape == (rows, 3) and samples.dtype == np.int64
    p = WEIGHTS / WEIGHTS.sum()
    _assert_frequencies(samples[:, :1], {(i,): p[i] for i in range(5)}, rows)
    _assert_frequencies(samples[:, 2:], {(i,): p[i] for i in range(5)}, rows)
    # draws within a row are independent: the pair (first, second) has probability p_i * p_j
    _assert_frequencies(samples[:, :2], {(i, j): p[i] * p[j] for i, j in itertools.product(range(5), repeat=2)}, rows)


def test_without_replacement_follows_drawing_one_at_a_time():
    kiln.manual_seed(2)
    rows = 6000
    samples = kiln.multinomial(kiln.tensor(np.tile(WEIGHTS, (rows, 1))), 2).numpy()
    p = WEIGHTS / WEIGHTS.sum()
    # P(first i, then j) = p_i * p_j / (1 - p_i): the sequential definition
    expected = {(i, j): (p[i] * p[j] / (1 - p[i]) if i != j else 0.0)
                for i, j in itertools.product(range(5), repeat=2)}
    _assert_frequencies(samples, expected, rows)
    assert (samples[:, 0] != samples[:, 1]).all()


def test_without_replacement_draws_every_positive_category_once():
    kiln.manual_seed(3)
    out = kiln.multinomial(kiln.tensor([[0.0, 5.0, 1e-6, 2.0]] * 50), 3).numpy()
    assert (np.sort(out, axis=1) == [1, 2, 3]).all()


def test_one_dimensional_input_and_certain_outcomes():
    out = kiln.multinomial(kiln.tensor([0.0, 0.0, 7.0]), 5, replacement=True)
    assert out.shape == (5,) and out.tolist() == [2] * 5
    out = kiln.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=kiln.float64).multinomial(1)
    assert out.tolist() == [[0], [1]]


def test_the_same_seed_gives_the_same_samples_and_calls_differ():
    probs = kiln.tensor(np.tile(WEIGHTS, (3, 1)))
    kiln.manual_seed(7)
    first, second = kiln.multinomial(probs, 4, True), kiln.multinomial(probs, 4, True)
    kiln.manual_seed(7)
    np.testing.assert_array_equal(kiln.multinomial(probs, 4, True).numpy(), first.numpy())
    assert not np.array_equal(first.numpy(), second.numpy())
    gen = kiln.Generator(5)
    a = kiln.multinomial(probs, 3, generator=gen)
    gen.manual_seed(5)
    np.testing.assert_array_equal(kiln.multinomial(probs, 3, generator=gen).numpy(), a.numpy())


@pytest.mark.parametrize("replacement", [True, False])
def test_compiled_draws_the_same_samples_as_eager(replacement):
    def sample(logits):
        probs = kiln.nn.functional.softmax(logits, dim=-1)
        return kiln.multinomial(probs, 2, replacement=replacement)

    logits = kiln.randn(4, 6)
    compiled = kiln.compile(sample, fullgraph=True)
    kiln.manual_seed(11)
    eager = [sample(logits).numpy() for _ in range(3)]
    kiln.manual_seed(11)
    got = [compiled(logits).numpy() for _ in range(3)]
    for e, c in zip(eager, got):
        np.testing.assert_array_equal(c, e)
    assert not all(np.array_equal(eager[0], e) for e in eager[1:])  # fresh samples on every call
    assert compiled.stats.hits == 2


def test_compiled_plan_checks_the_weights_on_every_call():
    compiled = kiln.compile(lambda p: kiln.multinomial(p, 1), fullgraph=True)
    compiled(kiln.tensor([[0.5, 0.5]]))
    with pytest.raises(MultinomialWeightsError, match="sums to 0"):
        compiled(kiln.tensor([[0.0, 0.0]]))


@pytest.mark.parametrize("weights, kwargs, error, match", [
    ([0.5, -0.1], {}, MultinomialWeightsError, "inf, NaN or a negative element"),
    ([0.5, float("nan")], {}, MultinomialWeightsError, "inf, NaN or a negative element"),
    ([float("inf"), 1.0], {}, MultinomialWeightsError, "inf, NaN or a negative element"),
    ([[0.0, 0.0], [1.0, 1.0]], {}, MultinomialWeightsError, "sums to 0"),
    ([1.0, 0.0, 0.0], {"num_samples": 2}, MultinomialWeightsError, "only 1 categories of positive weight"),
    ([1.0, 1.0], {"num_samples": 3}, ValueError, "cannot draw 3 samples without replacement from 2"),
    ([1.0, 1.0], {"num_samples": 0}, ValueError, "num_samples must be positive"),
    ([[[1.0]]], {}, ValueError, "1-D or 2-D"),
    ([1, 2], {}, TypeError, "floating point weights, got int64"),
])
def test_bad_weights_raise_clear_errors(weights, kwargs, error, match):
    kwargs = {"num_samples": 1, **kwargs}
    with pytest.raises(error, match=match):
        kiln.multinomial(kiln.tensor(weights), **kwargs)


def test_a_generator_made_inside_a_compiled_function_is_a_graph_break():
    def f(p):
        return kiln.multinomial(p, 1, generator=kiln.Generator(0))

    with pytest.raises(GraphBreakError, match="Generator created"):
        kiln.compile(f, fullgraph=True)(kiln.tensor([0.5, 0.5]))
