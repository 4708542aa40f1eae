"""The public JIT API: compile, JITFunction/JITModule, jit/djit, options, errors and explain()."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln.device import cuda_is_available
from kiln.jit import DynamicJITFunction, JITFunction, JITModule

nn = kiln.nn


def close(a, b, rtol=1e-6):
    np.testing.assert_allclose(np.asarray(a.numpy() if hasattr(a, "numpy") else a),
                               np.asarray(b.numpy() if hasattr(b, "numpy") else b), rtol=rtol, atol=1e-7)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.tag = "custom"

    def forward(self, x):
        return kiln.relu(self.fc(x))

    def describe(self) -> str:
        return f"net:{self.tag}"


# ---- kiln.compile: targets and errors -----------------------------------------------------


def test_compile_rejects_non_callables_with_the_seed_message():
    with pytest.raises(TypeError) as info:
        kiln.compile(42)
    assert str(info.value) == "kiln.compile() expects an nn.Module or a callable, got <class 'int'>"
    with pytest.raises(TypeError, match=re.escape("got <class 'str'>")):
        kiln.compile("model")
    with pytest.raises(TypeError, match="expects an nn.Module or a callable"):
        kiln.compile(kiln.randn(2))


def test_compile_returns_jit_module_for_modules_and_jit_function_for_functions():
    def f(x):
        return x * 2

    assert type(kiln.compile(f)) is JITFunction
    assert isinstance(kiln.compile(Net()), JITModule)
    assert kiln.CompiledFunction is kiln.JITFunction is JITFunction
    assert kiln.JITModule is JITModule
    assert kiln.compile(f).__name__ == "f"  # wraps the function's metadata


def test_compile_as_a_decorator_with_and_without_options():
    @kiln.compile
    def f(x):
        return x + 1

    @kiln.compile(max_cache_size=1, eviction="fifo")
    def g(x):
        return x - 1

    x = kiln.randn(3)
    with kiln.no_grad():
        close(f(x), x.numpy() + 1)
        close(g(x), x.numpy() - 1)
    assert isinstance(f, JITFunction) and isinstance(g, JITFunction)


def test_second_call_hits_and_results_follow_the_inputs():
    f = kiln.compile(lambda a, b: (a * b).sum(axis=0))
    a, b = kiln.randn(4, 3), kiln.randn(4, 3)
    with kiln.no_grad():
        close(f(a, b), (a * b).sum(axis=0))
        a2 = kiln.randn(4, 3)
        close(f(a2, b), (a2 * b).sum(axis=0))
    assert (f.stats.misses, f.stats.hits, f.stats.traces) == (1, 1, 1)


def test_max_cache_size_is_an_alias_of_max_cache_entries():
    f = kiln.compile(lambda x: x * 2, max_cache_size=2, dynamic=False)
    with kiln.no_grad(), pytest.warns(RuntimeWarning, match=r"dimension 0 of argument 0.*dynamic_dims"):
        for n in (1, 2, 3):
            f(kiln.randn(n))
    assert f.stats.cache_size == 2 and f.stats.evictions == 1
    g = kiln.compile(lambda x: x * 2, max_cache_entries=2, dynamic=False)
    with kiln.no_grad(), pytest.warns(RuntimeWarning, match="recompiled"):
        for n in (1, 2, 3):
            g(kiln.randn(n))
    assert g.stats.cache_size == 2 and g.stats.evictions == 1
    with pytest.raises(ValueError, match="alias"):
        kiln.compile(lambda x: x, max_cache_entries=2, max_cache_size=3)


@pytest.mark.parametrize("bad", [0, -1])
def test_non_positive_cache_size_is_rejected(bad):
    with pytest.raises(ValueError, match="positive"):
        kiln.compile(lambda x: x, max_cache_entries=bad)


def test_bad_eviction_string_is_a_value_error():
    with pytest.raises(ValueError, match="'lru' or 'fifo'.*'random'"):
        kiln.compile(lambda x: x, eviction="random")
    kiln.compile(lambda x: x, eviction="fifo")
    kiln.compile(lambda x: x, eviction="lru")


@pytest.mark.parametrize("spec, match", [
    ([0], "must be a dict"),
    ("batch", "must be a dict"),
    ({0: [0]}, r"dynamic_dims\[0\] must be a dict"),
    ({-1: {0: "B"}}, "non-negative"),
    ({0: {0: 5}}, "identifier"),
    ({0: {0: "not a name"}}, "identifier"),
])
def test_bad_dynamic_dims_spec_is_a_value_error(spec, match):
    with pytest.raises(ValueError, match=match):
        kiln.compile(lambda x: x, dynamic_dims=spec)


def test_dynamic_dims_out_of_range_is_a_value_error_at_call_time():
    f = kiln.compile(lambda x: x * 2, dynamic_dims={3: {0: "B"}})
    with pytest.raises(ValueError, match="argument 3.*1 positional"):
        f(kiln.randn(2))
    g = kiln.compile(lambda x: x * 2, dynamic_dims={0: {5: "B"}})
    with pytest.raises(ValueError, match=r"dim 5 of argument 0.*\(2,\)"):
        g(kiln.randn(2))
    h = kiln.compile(lambda x, n: x * n, dynamic_dims={1: {0: "B"}})
    with pytest.raises(ValueError, match="not a Tensor"):
        h(kiln.randn(2), 3)


def test_bad_user_pass_is_a_type_error():
    with pytest.raises(TypeError, match="passes"):
        kiln.compile(lambda x: x, passes=["CSE"])


# ---- kiln.jit and kiln.djit ----------------------------------------------------------------


def branchy(x):
    if x.sum() > 0:  # data-dependent Python
        return x * 2
    return x - 1


def test_jit_as_decorator_and_as_call():
    @kiln.jit
    def f(x):
        return x * 3

    g = kiln.jit(lambda x: x * 3)
    h = kiln.jit(static=True)(lambda x: x * 3)
    x = kiln.randn(4)
    with kiln.no_grad():
        for fn in (f, g, h):
            close(fn(x), x.numpy() * 3)
            close(fn(x), x.numpy() * 3)
            assert isinstance(fn, JITFunction)
            assert (fn.stats.traces, fn.stats.hits) == (1, 1)


def test_jit_rejects_non_callables():
    with pytest.raises(TypeError, match="callable"):
        kiln.jit(42)


def test_jit_auto_device_is_a_no_op_on_cpu():
    f = kiln.jit(lambda x: x + 1, auto_device=True)
    g = kiln.djit(lambda x: x + 1, auto_device=False)
    x = kiln.randn(2)
    with kiln.no_grad():
        if not cuda_is_available():
            assert f(x).device == x.device
            assert g(x).device == x.device
        close(f(x), x.numpy() + 1)
        close(g(x), x.numpy() + 1)


@pytest.mark.parametrize("make", [
    lambda fn: kiln.djit(fn),
    lambda fn: kiln.djit()(fn),
    lambda fn: kiln.jit(fn, static=False),
    lambda fn: kiln.jit(static=False)(fn),
])
def test_djit_runs_the_python_every_call_and_reuses_plans_by_structure(make):
    f = make(branchy)
    assert isinstance(f, DynamicJITFunction)
    pos, neg = kiln.tensor([1.0, 2.0]), kiln.tensor([-1.0, -2.0])
    with kiln.no_grad():
        for _ in range(3):
            close(f(pos), [2.0, 4.0])
            close(f(neg), [-2.0, -3.0])
            close(f(kiln.tensor([3.0, 5.0])), [6.0, 10.0])
    assert f.stats.traces == 9  # the Python ran (recording) on every call
    # each call runs two graphs: `x.sum() > 0` when `if` needs it, then x*2 or x-1 for the result
    assert f.stats.misses == 3  # three graph structures: sum > 0, x*2, x-1
    assert f.stats.hits == 15
    assert f.stats.cache_size == 3


def test_djit_works_with_gradients():
    f = kiln.djit(lambda x: (x * x).sum())
    x = kiln.tensor([1.0, -2.0, 3.0], requires_grad=True)
    f(x).backward()
    close(x.grad, [2.0, -4.0, 6.0])


def test_static_jit_with_data_dependent_python_is_never_silently_wrong():
    f = kiln.jit(branchy)  # a plan per path, each guarded on the branch value
    pos, neg = kiln.tensor([1.0, 2.0]), kiln.tensor([-1.0, -2.0])
    with kiln.no_grad():
        for _ in range(2):
            close(f(pos), [2.0, 4.0])
            close(f(neg), [-2.0, -3.0])
    assert (f.stats.traces, f.stats.fallbacks) == (2, 0)
    g = kiln.jit(lambda x: x * 2 if x.sum().item() > 0 else x - 1)  # .item(): any Python use, so eager
    with pytest.warns(RuntimeWarning, match="falling back|data-dependent"):
        for _ in range(2):
            close(g(pos), [2.0, 4.0])
            close(g(neg), [-2.0, -3.0])


# ---- methods ----------------------------------------------------------------------------


def test_compiled_method_binds_self():
    class Scaler:
        def __init__(self, k):
            self.k = k

        @kiln.compile
        def apply(self, x):
            return x * 2 + 1

    s = Scaler(2)
    x = kiln.randn(3)
    with kiln.no_grad():
        close(s.apply(x), x.numpy() * 2 + 1)
        close(s.apply(x), x.numpy() * 2 + 1)


# ---- JITModule ------------------------------------------------------------------------------


def test_module_compile_returns_a_jit_module_that_matches_eager():
    m = Net()
    cm = m.compile()
    assert isinstance(cm, JITModule) and cm.module is m
    x = kiln.randn(4, 3)
    with kiln.no_grad():
        close(cm(x), m(x))
        close(cm(x), m(x))
    assert cm.stats.hits == 1
    assert isinstance(m.compile(max_cache_size=1), JITModule)


def test_jit_module_delegates_attributes():
    m = Net()
    cm = kiln.compile(m)
    assert cm.training is True
    assert cm.tag == "custom" and cm.describe() == "net:custom"
    assert cm.fc is m.fc
    assert [id(p) for p in cm.parameters()] == [id(p) for p in m.parameters()]
    assert [n for n, _ in cm.named_parameters()] == ["fc.weight", "fc.bias"]
    assert list(cm.state_dict()) == ["fc.weight", "fc.bias"]
    with pytest.raises(AttributeError):
        cm.no_such_attribute  # noqa: B018


def test_jit_module_train_and_eval_return_it_and_switch_plans():
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    cm = kiln.compile(m)
    assert cm.eval() is cm
    assert m.training is False and cm.training is False
    x = kiln.randn(8, 3)
    with kiln.no_grad():
        close(cm(x), m(x))  # eval: dropout is the identity
        assert cm.train() is cm
        assert m.training is True and cm.training is True
        cm(x)
        assert cm.train(False) is cm and m.training is False
        close(cm(x), m(x))
    assert cm.stats.misses == 2 and cm.stats.hits == 1


def test_jit_module_reads_loaded_weights():
    m = Net()
    cm = kiln.compile(m)
    x = kiln.randn(4, 3)
    with kiln.no_grad():
        cm(x)
        m.load_state_dict({k: v * 0 + 0.5 for k, v in m.state_dict().items()})
        expected = np.maximum(x.numpy().sum(axis=1, keepdims=True) * 0.5 + 0.5, 0).repeat(2, axis=1)
        close(cm(x), expected)
        close(cm(x), expected)
    assert cm.stats.traces == 1


# ---- explain() ------------------------------------------------------------------------------


SUB_RULE = "add(a, mul(b, -1)) -> sub(a, b)"


def test_explain_shows_the_sub_rewrite_when_it_fires():
    f = kiln.compile(lambda a, b: (a + b * -1).exp())
    a, b = kiln.randn(3), kiln.randn(3)
    with kiln.no_grad():
        close(f(a, b), np.exp(a.numpy() - b.numpy()), rtol=1e-5)
        close(f(a, b), np.exp(a.numpy() - b.numpy()), rtol=1e-5)
    text = f.explain()
    assert SUB_RULE in text
    assert re.search(r"SubRewrite\s+3 -> 4\s+nodes", text), text
    assert [n.prim.name for n in f.graphs()[0].nodes] == ["sub", "exp"]


def test_explain_shows_the_sub_rewrite_in_training_plans_too():
    w = kiln.randn(3, requires_grad=True)
    f = kiln.compile(lambda a: (a + w * -1).sum())
    a = kiln.randn(3)
    f(a).backward()
    close(w.grad, -np.ones(3))
    assert SUB_RULE in f.explain()


def test_explain_does_not_claim_a_rewrite_that_did_not_fire():
    f = kiln.compile(lambda a, b: a - b * 2)
    with kiln.no_grad():
        f(kiln.randn(3), kiln.randn(3))
    text = f.explain()
    assert SUB_RULE not in text
    for name in ("ConstantFold", "ArithmeticElimination", "CSE", "DeadNodeElim", "NoGradStrip"):
        assert name in text


def test_explain_names_the_changed_key_field_on_each_miss():
    f = kiln.compile(lambda x: x * 2, dynamic=False)
    with kiln.no_grad():
        f(kiln.randn(2))
        f(kiln.randn(3))
        f(kiln.randn(3).double())
    text = f.explain()
    assert "first call" in text
    assert "shape (2,) -> (3,)" in text
    assert "dtype" in text


def test_keyword_arguments_are_inputs():
    f = kiln.compile(lambda x, *, scale: x * scale)
    x = kiln.randn(3)
    with kiln.no_grad():
        s1, s2 = kiln.tensor(2.0), kiln.tensor(5.0)
        close(f(x, scale=s1), x.numpy() * 2)
        close(f(x, scale=s2), x.numpy() * 5)
    assert f.stats.hits == 1
