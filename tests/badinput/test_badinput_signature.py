"""Bad calls to a compiled function raise the very TypeError Python raises for the original."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import nn

A, B = kiln.ones(3), kiln.full((3,), 2.0)


def two(x, y):
    return x + y


def keyword_only(x, *, scale, shift=0.0):
    return x * scale + shift


def varargs(x, *rest, **options):
    return x + sum(rest) if rest else x


def positional_only(x, y, /):
    return x * y


class Callable:
    def __call__(self, x, y):
        return x - y


class Scaler:
    def __init__(self):
        self.k = 2.0

    def apply(self, x):
        return x * self.k

    @kiln.compile
    def compiled_apply(self, x):
        return x * self.k


def python_error(fn, args, kwargs):
    try:
        fn(*args, **kwargs)
    except TypeError as exc:
        return str(exc)
    raise AssertionError(f"Python accepted {fn}{args}{kwargs}")


BAD_CALLS = [
    (two, (A,), {}),  # missing positional
    (two, (A, B, A), {}),  # too many positional
    (two, (A, B), {"z": A}),  # unexpected keyword
    (two, (A,), {"x": A, "y": B}),  # multiple values for x
    (two, (), {}),  # nothing at all
    (keyword_only, (A,), {}),  # missing keyword-only
    (keyword_only, (A, 2.0), {}),  # keyword-only passed positionally
    (keyword_only, (A,), {"scale": 2.0, "shfit": 1.0}),  # a typo in a keyword
    (varargs, (), {"options": 1}),  # missing x with **kwargs present
    (positional_only, (A,), {"y": B}),  # positional-only passed by keyword
    (Callable(), (A,), {}),  # a callable object
    (Scaler().apply, (A, B), {}),  # a bound method
]


@pytest.mark.parametrize("fn, args, kwargs", BAD_CALLS, ids=[f"{i}" for i in range(len(BAD_CALLS))])
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_bad_call_raises_the_same_type_error_as_python(fn, args, kwargs, warm):
    want = python_error(fn, args, kwargs)
    f = kiln.compile(fn)
    if warm:  # a good call first: the error must not depend on what is cached
        good = {two: ((A, B), {}), keyword_only: ((A,), {"scale": 2.0}), varargs: ((A,), {}),
                positional_only: ((A, B), {})}
        gargs, gkwargs = good.get(fn, ((A, B), {}) if not isinstance(fn, type(Scaler().apply)) else ((A,), {}))
        f(*gargs, **gkwargs)
    with pytest.raises(TypeError) as info:
        f(*args, **kwargs)
    assert str(info.value) == want
    assert f.stats.cache_size == (1 if warm else 0)


def test_decorated_method_bad_calls_match_python():
    s = Scaler()
    want = python_error(Scaler.__dict__["compiled_apply"].__wrapped__, (s, A, B), {})
    with pytest.raises(TypeError) as info:
        s.compiled_apply(A, B)
    assert str(info.value) == want
    np.testing.assert_array_equal(s.compiled_apply(A).numpy(), 2.0)


@pytest.mark.parametrize("args, kwargs", [((), {}), ((A, B), {}), ((A,), {"bogus": 1})])
def test_jit_module_bad_calls_match_the_eager_module(args, kwargs):
    model = nn.Linear(3, 2)
    with pytest.raises(TypeError) as eager:
        model(*args, **kwargs)
    with pytest.raises(TypeError) as compiled:
        kiln.compile(model)(*args, **kwargs)
    assert str(compiled.value) == str(eager.value)


def test_dynamic_dims_do_not_hide_a_missing_argument():
    want = python_error(two, (A,), {})
    f = kiln.compile(two, dynamic_dims={1: {0: "n"}})
    with pytest.raises(TypeError) as info:
        f(A)
    assert str(info.value) == want


def test_dynamic_dims_for_an_argument_passed_by_keyword():
    f = kiln.compile(two, dynamic_dims={0: {0: "n"}, 1: {0: "n"}})
    for n in (2, 3, 5):
        x, y = kiln.ones(n), kiln.arange(float(n))
        np.testing.assert_array_equal(f(x, y=y).numpy(), (x + y).numpy())
        np.testing.assert_array_equal(f(x=x, y=y).numpy(), (x + y).numpy())
    assert f.stats.misses == 2  # one plan per call style, shared across sizes
    with pytest.raises(ValueError, match="not a Tensor"):
        f(A, y=2.0)


# ---- arguments that are not tensors ------------------------------------------------------------


def test_numpy_array_arguments_are_keyed_by_content():
    import gc

    f = kiln.compile(lambda a, x: x * kiln.tensor(a).sum())
    x = kiln.ones(1)
    for k in range(5):  # a freed array's id is often reused by the next one: ids must not key plans
        a = np.zeros(5000, dtype=np.float32)
        a[2500] = k
        assert float(f(a, x)[0]) == k
        del a
        gc.collect()
    small = np.array([1.0, 2.0])
    f(small, x)
    small[0] = 5.0  # mutated in place: a new value
    assert float(f(small, x)[0]) == 7.0


@pytest.mark.parametrize("value", [2, 2.0, True, "s", None, (1, 2), np.float32(2.0), float("nan")])
def test_python_scalar_arguments_key_by_type_and_value(value):
    def fn(x, v):
        return x + (1.0 if v is None else 2.0 if isinstance(v, (tuple, str)) else float(v) if v == v else 9.0)

    f = kiln.compile(fn)
    for _ in range(2):
        np.testing.assert_array_equal(f(A, value).numpy(), fn(A, value).numpy())
    assert f.stats.misses == 1 and f.stats.hits == 1


def test_fold2d_names_the_column_shape_it_expected() -> None:
    import kiln.functional as F  # noqa: PLC0415

    cols = F.unfold2d(kiln.randn(1, 2, 5, 5), (3, 3), (1, 1), (0, 0), (1, 1))
    assert tuple(F.fold2d(cols, (5, 5), (3, 3), (1, 1), (0, 0), (1, 1)).shape) == (1, 2, 5, 5)
    with pytest.raises(kiln.ShapeError, match=r"must have shape \(N, C, 3, 3, 2, 2\), got \(1, 2, 3, 3, 3, 3\)"):
        F.fold2d(cols, (4, 4), (3, 3), (1, 1), (0, 0), (1, 1))
