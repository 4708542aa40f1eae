"""Acceptance 5-6: module hooks around compiled plans; data-dependent branches and graph breaks."""
from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import kiln
from kiln import nn

from jit_helpers import assert_close


def test_pre_hook_scaling_the_input_applies_on_every_call():
    model = nn.Linear(3, 2)
    scale = {"value": 2.0}
    model.register_forward_pre_hook(lambda m, args: (args[0] * scale["value"],))
    f = kiln.compile(model)
    x = kiln.randn(4, 3)
    for value in (2.0, 3.0, -1.0):
        scale["value"] = value
        assert_close(f(x), model(x))
    assert f.stats.traces == 1


def test_forward_hook_return_value_replaces_output():
    model = nn.Linear(3, 2)
    model.register_forward_hook(lambda m, args, out: out * 0 + 7)
    f = kiln.compile(model)
    for _ in range(2):
        np.testing.assert_allclose(f(kiln.randn(4, 3)).detach().numpy(), 7.0)


def test_adding_or_removing_a_submodule_hook_invalidates_plans():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    f = kiln.compile(model)
    x = kiln.randn(2, 3)
    f(x)
    handle = model[0].register_forward_hook(lambda m, a, out: out + 100.0)
    out = f(x)
    assert_close(out, model(x))
    assert out.detach().numpy().min() >= 90.0
    handle.remove()
    assert_close(f(x), model(x))
    assert f.stats.traces == 3


def _branchy(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def test_data_dependent_branch_is_correct_for_both_signs_and_counted():
    f = kiln.compile(_branchy)
    pos, neg = kiln.ones(3), -kiln.ones(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in (pos, neg, pos, neg):
            assert_close(f(x), _branchy(x))
    assert f.stats.fallbacks == 0  # a plan per path (branches.py)
    assert (f.stats.misses, f.stats.hits, f.stats.cache_size) == (2, 2, 1)
    assert not [w for w in caught if "kiln" in str(w.message)]


def test_a_branch_in_a_call_that_needs_gradients_falls_back_to_eager():
    f = kiln.compile(_branchy)
    pos, neg = kiln.ones(3, requires_grad=True), -kiln.ones(3, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in (pos, neg, pos, neg):
            assert_close(f(x), _branchy(x))
    assert f.stats.fallbacks == 3  # every call after the first trace runs eagerly
    assert sum("falling back to eager" in str(w.message) and "gradients" in str(w.message) for w in caught) == 1


def test_fullgraph_raises_graph_break_error_naming_the_user_line():
    def branch(x):
        if x.sum() > 0:  # the offending line
            return x
        return -x

    f = kiln.compile(branch, fullgraph=True)
    with pytest.raises(kiln.GraphBreakError) as info:
        f(kiln.ones(2))
    line = inspect.getsourcelines(branch)[1] + 1
    assert f"{__file__}:{line}" in str(info.value)
    assert f.stats.cache_size == 0


@pytest.mark.parametrize("conversion", [float, int, bool, lambda t: t.item(), lambda t: t.tolist(),
                                        lambda t: t.numpy()])
def test_every_python_conversion_is_detected(conversion):
    def fn(x):
        conversion(x.sum())
        return x + 1

    with pytest.raises(kiln.GraphBreakError):
        kiln.compile(fn, fullgraph=True)(kiln.ones(2))


def test_exception_in_traced_function_leaves_no_cache_entry():
    calls = {"n": 0}

    def flaky(x):
        calls["n"] += 1
        if calls["n"] == 1:
            raise ValueError("boom")
        return x + 1

    f = kiln.compile(flaky)
    with pytest.warns(RuntimeWarning, match="Python side effect"):  # calls["n"] += 1 runs only while tracing
        with pytest.raises(ValueError, match="boom"):
            f(kiln.ones(2))
    assert f.stats.cache_size == 0
    np.testing.assert_allclose(f(kiln.ones(2)).numpy(), 2.0)
