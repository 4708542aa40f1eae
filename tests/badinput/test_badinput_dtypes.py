"""A tensor of the wrong dtype for an op gets a specific exception naming the op and the dtype,
the same eager and compiled (on the first call, and when other signatures are cached)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F

F32, I64 = kiln.float32, kiln.int64


def table():
    return kiln.randn(5, 4)


# name: (fn, bad args, good args (same shapes, right dtypes), exception, message regex)
CASES = {
    "embedding_float_indices": (lambda i, w: F.embedding(i, w), lambda: (kiln.ones(3), table()),
                                lambda: (kiln.ones(3, dtype=I64), table()), TypeError, r"embedding.*float32"),
    "embedding_bool_indices": (lambda i, w: F.embedding(i, w), lambda: (kiln.ones(5, dtype=kiln.bool), table()),
                               lambda: (kiln.ones(5, dtype=I64), table()), TypeError, r"embedding.*bool"),
    "gather_float_index": (lambda x, i: x.gather(1, i), lambda: (kiln.randn(2, 3), kiln.zeros(2, 3)),
                           lambda: (kiln.randn(2, 3), kiln.zeros(2, 3, dtype=I64)), TypeError, r"gather.*float32"),
    "scatter_add_float_index": (lambda x, i: x.scatter_add(1, i, x), lambda: (kiln.randn(2, 3), kiln.zeros(2, 3)),
                                lambda: (kiln.randn(2, 3), kiln.zeros(2, 3, dtype=I64)), TypeError,
                                r"scatter_add.*float32"),
    "index_select_float_index": (lambda x, i: x.index_select(0, i), lambda: (kiln.randn(3, 2), kiln.zeros(2)),
                                 lambda: (kiln.randn(3, 2), kiln.zeros(2, dtype=I64)), TypeError,
                                 r"index_select.*float32"),
    "cross_entropy_float_target_wrong_shape": (lambda x, t: F.cross_entropy(x, t),
                                               lambda: (kiln.randn(4, 3), kiln.ones(4)),
                                               lambda: (kiln.randn(4, 3), kiln.ones(4, 3)), kiln.ShapeError,
                                               r"cross_entropy.*\(4,\).*\(4, 3\)"),
    "nll_loss_float_target": (lambda x, t: F.nll_loss(x, t), lambda: (kiln.randn(4, 3), kiln.ones(4)),
                              lambda: (kiln.randn(4, 3), kiln.ones(4, dtype=I64)), TypeError, r"nll_loss.*int64"),
    "one_hot_float": (lambda i: F.one_hot(i, 3), lambda: (kiln.ones(3),), lambda: (kiln.ones(3, dtype=I64),),
                      TypeError, r"one_hot.*float32"),
    "float_tensor_as_index": (lambda x, i: x[i], lambda: (kiln.randn(3), kiln.zeros(2)),
                              lambda: (kiln.randn(3), kiln.zeros(2, dtype=I64)), IndexError,
                              r"integer or bool.*float32"),
    "and_of_floats": (lambda a, b: a & b, lambda: (kiln.ones(3), kiln.ones(3)),
                      lambda: (kiln.ones(3) > 0, kiln.ones(3) > 0), TypeError, r"&.*float32"),
    "or_of_floats": (lambda a, b: a | b, lambda: (kiln.ones(3), kiln.ones(3, dtype=I64)),
                     lambda: (kiln.ones(3, dtype=I64), kiln.ones(3, dtype=I64)), TypeError, r"\|.*float32"),
    "invert_float": (lambda a: ~a, lambda: (kiln.ones(3),), lambda: (kiln.ones(3) > 0,), TypeError, r"~.*float32"),
    "randn_int_dtype": (lambda x: x + kiln.randn(3, dtype=I64), lambda: (kiln.ones(3),), None, TypeError,
                        r"randn.*int64"),
    "rand_like_int": (lambda x: kiln.rand_like(x), lambda: (kiln.ones(3, dtype=I64),), lambda: (kiln.ones(3),),
                      TypeError, r"rand.*int64"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_wrong_dtype_error_is_specific_and_the_same_eager_and_compiled(name):
    fn, bad, good, exc, pattern = CASES[name]
    with pytest.raises(exc, match=pattern) as eager:
        fn(*bad())
    f = kiln.compile(fn)
    with pytest.raises(exc) as cold:
        f(*bad())
    assert str(cold.value) == str(eager.value)
    if good is not None:
        f(*good())  # a plan for the right dtypes exists now: the bad call must still fail the same way
        with pytest.raises(exc) as warm:
            f(*bad())
        assert str(warm.value) == str(eager.value)
    assert f.stats.misses == (1 if good is not None else 0)


def test_bool_masks_still_combine():
    a, b = kiln.tensor([True, False, True]), kiln.tensor([True, True, False])
    f = kiln.compile(lambda a, b: (a & b, a | b, ~a, (a & True) | False))
    for got, want in zip(f(a, b), (a & b, a | b, ~a, a)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_mixed_int_and_float_operands_promote_the_same_way_compiled():
    def fn(i, x):
        return i @ x, i * x.T, i + 1, i / 2

    f = kiln.compile(fn)
    i, x = kiln.ones(2, 3, dtype=I64), kiln.randn(3, 2)
    for _ in range(2):
        for got, want in zip(f(i, x), fn(i, x)):
            assert got.dtype == want.dtype
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_out_of_range_index_on_a_cache_hit_raises_like_eager():
    w = table()
    f = kiln.compile(lambda i: F.embedding(i, w))
    f(kiln.tensor([0, 1]))
    bad = kiln.tensor([0, 7])
    with pytest.raises(IndexError) as eager:
        F.embedding(bad, w)
    with pytest.raises(IndexError) as compiled:
        f(bad)
    assert re.search(r"\b7\b", str(eager.value)) and re.search(r"\b7\b", str(compiled.value))
    assert f.stats.misses == 1
