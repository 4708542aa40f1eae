"""Unusual outputs work compiled: non-tensors, None, nesting, empty tensors, objects holding tensors."""
from __future__ import annotations

import dataclasses
import warnings
from typing import NamedTuple

import numpy as np
import pytest

import kiln


def arr(t):
    return t.detach().numpy().copy()


class Pair(NamedTuple):
    value: kiln.Tensor
    label: str


@dataclasses.dataclass
class Result:
    loss: kiln.Tensor
    count: int
    extra: object = None


OUTPUTS = {
    "none": lambda x: None,
    "int": lambda x: 7,
    "string": lambda x: "done",
    "shape": lambda x: x.shape,
    "numel_and_dtype": lambda x: (x.numel(), x.dtype, x.device),
    "mixed_tuple": lambda x: (x * 2, 1, "s", None, 2.5),
    "nested": lambda x: [x + 1, {"a": x * 3, "b": None, "c": [1, (x.sum(), "z")]}],
    "namedtuple": lambda x: Pair(x.exp(), "exp"),
    "dataclass": lambda x: Result(x.mean(), 4, None),
    "dict_of_none": lambda x: {"grad": None, "out": x - 1},
    "same_tensor_twice": lambda x: (x * 2,) * 2,
}


def _check_same(got, want):
    if isinstance(want, kiln.Tensor):
        assert isinstance(got, kiln.Tensor) and got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(arr(got), arr(want), rtol=1e-6)
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _check_same(g, w)
    elif isinstance(want, dict):
        assert type(got) is dict and list(got) == list(want)
        for k in want:
            _check_same(got[k], want[k])
    elif dataclasses.is_dataclass(want):
        assert type(got) is type(want)
        for field in dataclasses.fields(want):
            _check_same(getattr(got, field.name), getattr(want, field.name))
    else:
        assert got == want and type(got) is type(want)


@pytest.mark.parametrize("name", sorted(OUTPUTS))
@pytest.mark.parametrize("shape", [(2, 3), (0, 3)], ids=["full", "empty"])
def test_output_structures_compiled_equal_eager(name, shape):
    fn = OUTPUTS[name]
    f = kiln.compile(fn)
    for k in range(3):
        x = kiln.full(shape, float(k + 1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # empty means are nan in both
            _check_same(f(x), fn(x))
    assert f.stats.hits == 2 and f.stats.fallbacks == 0


def test_empty_tensors_in_a_training_plan_give_empty_grads():
    w = kiln.randn(3, requires_grad=True)

    def fn(x):
        return (x * w).sum(0), (x * w).sum()

    f = kiln.compile(fn)
    for _ in range(2):
        x = kiln.ones(0, 3, requires_grad=True)
        w.grad = None
        a, b = f(x)
        (a.sum() + b).backward()
        assert a.shape == (3,) and b.shape == ()
        np.testing.assert_array_equal(arr(a), 0.0)
        assert x.grad.shape == (0, 3)
        np.testing.assert_array_equal(arr(w.grad), 0.0)


def test_empty_reductions_keep_nan_and_inf_like_eager():
    def fn(x):
        return x.mean(0), x.amax(1) if x.shape[1] else x.sum(1), x.sum(0)

    f = kiln.compile(fn)
    x = kiln.ones(0, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(2):
            for g, w in zip(f(x), fn(x)):
                np.testing.assert_array_equal(arr(g), arr(w))  # NaN positions match too


def test_object_holding_tensors_is_never_served_stale():
    class Holder:  # not a pytree: the plan cannot rebuild it
        def __init__(self, t):
            self.t = t

    f = kiln.compile(lambda x: Holder(x * 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        first = f(kiln.ones(2))
        second = f(kiln.full((2,), 5.0))
    assert first is not second
    np.testing.assert_array_equal(arr(first.t), 2.0)
    np.testing.assert_array_equal(arr(second.t), 10.0)


def test_mutable_non_tensor_output_is_fresh_each_call():
    f = kiln.compile(lambda x: (x + 1, np.zeros(2), {1, 2}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _, a, s = f(kiln.ones(2))
        a += 5
        s.add(3)
        _, b, t = f(kiln.ones(2))
    np.testing.assert_array_equal(b, 0.0)
    assert t == {1, 2}


def test_object_output_with_fullgraph_is_a_graph_break():
    f = kiln.compile(lambda x: object(), fullgraph=True)
    with pytest.raises(kiln.GraphBreakError, match="object"):
        f(kiln.ones(2))


def test_function_without_tensor_arguments():
    f = kiln.compile(lambda n: kiln.arange(float(n)) * 2)
    for n in (3, 4, 3):
        np.testing.assert_array_equal(arr(f(n)), np.arange(n) * 2.0)
    g = kiln.compile(lambda: kiln.ones(2) + 1)
    np.testing.assert_array_equal(arr(g()), 2.0)
    np.testing.assert_array_equal(arr(g()), 2.0)
    assert g.stats.hits == 1
