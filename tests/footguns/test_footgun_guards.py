"""Footguns around guards: Python values and outside tensors a plan read while tracing, changed later.

Every test changes something between calls and checks the compiled result against eager.
A retrace is fine; a stale plan is the bug.
"""
from __future__ import annotations

import types

import numpy as np
import pytest

import kiln
from kiln import nn


def arr(t):
    return t.detach().numpy().copy() if isinstance(t, kiln.Tensor) else np.asarray(t)


X = kiln.arange(1.0, 5.0)


# ---- closure tensors: mutated in place, and rebound ----------------------------------------


def test_closure_tensor_mutated_in_place_between_training_calls():
    w = kiln.ones(4, requires_grad=True)
    f = kiln.compile(lambda x: (x * w).sum())
    for step in range(4):
        w.grad = None
        f(X).backward()
        np.testing.assert_allclose(arr(w.grad), arr(X))
        np.testing.assert_allclose(arr(f(X)), arr((X * w).sum()))
        with kiln.no_grad():
            w.mul_(2.0)  # like an optimizer step
    assert f.stats.traces == 1


def test_closure_tensor_rebound_to_another_tensor_and_shape():
    w = kiln.ones(4)

    def fn(x):
        return x * w

    f = kiln.compile(fn)
    np.testing.assert_allclose(arr(f(X)), arr(fn(X)))
    w = kiln.full((4,), 3.0)  # noqa: F841 - read by fn
    np.testing.assert_allclose(arr(f(X)), arr(fn(X)))
    w = kiln.full((1,), -1.0)  # noqa: F841 - a different shape, broadcasting
    np.testing.assert_allclose(arr(f(X)), arr(fn(X)))


def test_closure_list_element_rebound():
    ws = [kiln.ones(4)]
    f = kiln.compile(lambda x: x * ws[0])
    f(X)
    ws[0] = kiln.full((4,), 9.0)
    np.testing.assert_allclose(arr(f(X)), arr(X) * 9.0)


def test_closure_dict_flag_and_value():
    cfg = {"double": True, "shift": 1.0}

    def fn(x):
        y = x * 2 if cfg["double"] else x
        return y + cfg["shift"]

    f = kiln.compile(fn)
    for double, shift in ((True, 1.0), (False, 1.0), (False, -3.0), (True, 1.0)):
        cfg["double"], cfg["shift"] = double, shift
        np.testing.assert_allclose(arr(f(X)), arr(fn(X)))


# ---- Python scalars and flags: closure, global, module attribute, defaults, kwargs --------


def test_closure_bool_flag_controlling_a_branch():
    use_relu = True

    def fn(x):
        return (x - 2.5).relu() if use_relu else (x - 2.5).tanh()

    f = kiln.compile(fn)
    np.testing.assert_allclose(arr(f(X)), arr(fn(X)))
    use_relu = False  # noqa: F841 - read by fn
    np.testing.assert_allclose(arr(f(X)), arr(fn(X)), rtol=1e-6)


SCALE = 2.0


def _scaled(x):
    return x * SCALE


def test_global_scalar_changed():
    global SCALE
    f = kiln.compile(_scaled)
    try:
        for value in (2.0, 5.0, -1.0):
            SCALE = value
            np.testing.assert_allclose(arr(f(X)), arr(X) * value)
    finally:
        SCALE = 2.0


config = types.ModuleType("config")  # stands in for an imported settings module
config.EPS = 0.5
config.nested = types.SimpleNamespace(scale=2.0)


def _uses_module_attributes(x):
    return x * config.nested.scale + config.EPS


def test_python_module_attribute_changed(monkeypatch):
    monkeypatch.setattr(config, "EPS", 0.5)  # restored afterwards: the module is shared state
    monkeypatch.setattr(config, "nested", types.SimpleNamespace(scale=2.0))
    f = kiln.compile(_uses_module_attributes)
    np.testing.assert_allclose(arr(f(X)), arr(X) * 2.0 + 0.5)
    config.EPS = 10.0
    np.testing.assert_allclose(arr(f(X)), arr(X) * 2.0 + 10.0)
    config.nested.scale = -1.0
    np.testing.assert_allclose(arr(f(X)), arr(X) * -1.0 + 10.0)
    config.nested = types.SimpleNamespace(scale=3.0)
    np.testing.assert_allclose(arr(f(X)), arr(X) * 3.0 + 10.0)


def test_config_object_attribute_changed_class_default_then_instance():
    class Config:
        scale = 2.0  # a class attribute default, later shadowed on the instance

    cfg = Config()
    f = kiln.compile(lambda x: x * cfg.scale)
    np.testing.assert_allclose(arr(f(X)), arr(X) * 2.0)
    cfg.scale = 4.0
    np.testing.assert_allclose(arr(f(X)), arr(X) * 4.0)
    Config.scale = 7.0  # shadowed: no change
    np.testing.assert_allclose(arr(f(X)), arr(X) * 4.0)
    del cfg.scale
    np.testing.assert_allclose(arr(f(X)), arr(X) * 7.0)


def test_helper_function_reading_a_global():
    global SCALE

    def fn(x):
        return _scaled(x) + 1.0  # the global is read one call deeper

    f = kiln.compile(fn)
    try:
        f(X)
        SCALE = 6.0
        np.testing.assert_allclose(arr(f(X)), arr(X) * 6.0 + 1.0)
    finally:
        SCALE = 2.0


def test_default_arguments_omitted_passed_and_changed():
    def fn(x, k=2.0, *, bias=0.0):
        return x * k + bias

    f = kiln.compile(fn)
    np.testing.assert_allclose(arr(f(X)), arr(X) * 2.0)
    np.testing.assert_allclose(arr(f(X, 3.0)), arr(X) * 3.0)
    np.testing.assert_allclose(arr(f(X, k=4.0, bias=1.0)), arr(X) * 4.0 + 1.0)
    fn.__defaults__ = (5.0,)
    fn.__kwdefaults__ = {"bias": -1.0}
    np.testing.assert_allclose(arr(f(X)), arr(X) * 5.0 - 1.0)


def test_kwargs_training_flag_passed_as_an_argument():
    def fn(x, training=True):
        return nn.functional.dropout(x, 0.5, training=training)

    f = kiln.compile(fn)
    x = kiln.ones(64)
    for flag in (True, False, True, False):
        kiln.manual_seed(1)
        want = arr(fn(x, training=flag))
        kiln.manual_seed(1)
        np.testing.assert_array_equal(arr(f(x, training=flag)), want)
    np.testing.assert_array_equal(arr(f(x, False)), arr(x))
    assert f.stats.misses == 3  # training=True, training=False, and False passed positionally


def test_bound_method_reads_a_changed_attribute():
    class Scaler:
        def __init__(self):
            self.k = 2.0

        def run(self, x):
            return x * self.k

    s = Scaler()
    f = kiln.compile(s.run)
    f(X)
    s.k = 6.0
    np.testing.assert_allclose(arr(f(X)), arr(X) * 6.0)


def test_compiled_method_reads_a_changed_attribute_of_self():
    class Scaler:
        def __init__(self, k):
            self.k = k

        @kiln.compile
        def run(self, x):
            return x * self.k

    a, b = Scaler(2.0), Scaler(3.0)
    np.testing.assert_allclose(arr(a.run(X)), arr(X) * 2.0)
    np.testing.assert_allclose(arr(b.run(X)), arr(X) * 3.0)
    a.k = 10.0
    np.testing.assert_allclose(arr(a.run(X)), arr(X) * 10.0)


def test_object_argument_attribute_changed():
    class Options:
        def __init__(self):
            self.p = 1.0

    def fn(x, opts):
        return x + opts.p

    f = kiln.compile(fn)
    opts = Options()
    f(X, opts)
    opts.p = 8.0
    np.testing.assert_allclose(arr(f(X, opts)), arr(X) + 8.0)


# ---- modules reached from a compiled function (not a JITModule) ------------------------------


def test_function_closing_over_a_module_sees_train_eval_switch():
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    f = kiln.compile(lambda x: model(x).sum())
    x = kiln.randn(3, 4)
    f(x)
    model.eval()
    np.testing.assert_allclose(arr(f(x)), arr(model(x).sum()), rtol=1e-6)
    model.train()
    kiln.manual_seed(5)
    got = arr(f(x))
    kiln.manual_seed(5)
    np.testing.assert_allclose(got, arr(model(x).sum()), rtol=1e-6)


def test_function_closing_over_a_module_sees_replaced_params_and_new_hooks():
    model = nn.Linear(4, 2)
    f = kiln.compile(lambda x: model(x))
    x = kiln.randn(3, 4)
    f(x)
    model.weight = nn.Parameter(kiln.zeros(2, 4))
    np.testing.assert_allclose(arr(f(x)), arr(model(x)), rtol=1e-6)
    handle = model.register_forward_hook(lambda m, a, out: out * 0 + 5.0)
    np.testing.assert_allclose(arr(f(x)), 5.0)
    handle.remove()
    np.testing.assert_allclose(arr(f(x)), arr(model(x)), rtol=1e-6)


def test_module_passed_as_an_argument_sees_train_eval_switch():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.9))

    def fn(m, x):
        return m(x).sum()

    f = kiln.compile(fn)
    x = kiln.randn(3, 4)
    f(model, x)
    model.eval()
    np.testing.assert_allclose(arr(f(model, x)), arr(fn(model, x)), rtol=1e-6)


def test_module_python_attribute_read_through_a_closure():
    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.open = True

        def forward(self, x):
            return x if self.open else x * 0

    gate = Gate()
    f = kiln.compile(lambda x: gate(x) + 1)
    f(X)
    gate.open = False
    np.testing.assert_allclose(arr(f(X)), 1.0)


def test_inner_compiled_function_closure_change_reaches_the_outer_plan():
    k = 2.0
    inner = kiln.compile(lambda x: x * k)
    outer = kiln.compile(lambda x: inner(x) + 1)
    np.testing.assert_allclose(arr(outer(X)), arr(X) * 2.0 + 1)
    k = 3.0  # noqa: F841 - read by inner
    np.testing.assert_allclose(arr(outer(X)), arr(X) * 3.0 + 1)
    np.testing.assert_allclose(arr(inner(X)), arr(X) * 3.0)


def test_jit_module_reads_nested_config_object():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.cfg = types.SimpleNamespace(act="relu")

        def forward(self, x):
            y = self.fc(x)
            return y.relu() if self.cfg.act == "relu" else y.tanh()

    net = Net()
    f = kiln.compile(net)
    x = kiln.randn(3, 4)
    f(x)
    net.cfg.act = "tanh"
    np.testing.assert_allclose(arr(f(x)), arr(net(x)), rtol=1e-6)


def test_guards_do_not_retrace_when_nothing_changed():
    model = nn.Linear(4, 4)
    cfg = types.SimpleNamespace(scale=2.0)
    f = kiln.compile(lambda x: model(x) * cfg.scale + config.EPS)
    x = kiln.randn(2, 4)
    for _ in range(5):
        f(x)
    assert f.stats.traces == 1 and f.stats.hits == 4


def test_compiling_a_module_twice_keeps_separate_stats_and_leaves_the_module_alone():
    model = nn.Linear(4, 2)
    before = set(model.__dict__)
    a, b = kiln.compile(model), kiln.compile(model, fullgraph=True)
    assert set(model.__dict__) == before  # the JITModules' own settings are not written onto it
    a(kiln.randn(3, 4))
    assert (a.stats.misses, b.stats.misses) == (1, 0)
    assert a.fullgraph is False and b.fullgraph is True
    a.scale = 3.0  # other attribute writes still reach the module
    assert model.scale == 3.0


def test_closure_tensor_requires_grad_flipped_between_calls():
    w = kiln.ones(3)
    f = kiln.compile(lambda x: (x * w).sum())
    x = kiln.full((3,), 2.0)
    assert not f(x).requires_grad
    w.requires_grad_(True)  # unfrozen: the next call must record gradients for w
    f(x).backward()
    np.testing.assert_array_equal(arr(w.grad), 2.0)
    w.requires_grad_(False)  # frozen again
    w.grad = None
    assert not f(x).requires_grad
    assert f.stats.misses == 2  # both plans stay cached


def test_tensor_reached_only_through_a_helper_argument_requires_grad_flipped():
    class Box:
        def __init__(self, t):
            self.t = t

    box = Box(kiln.ones(3))

    def helper(b, x):  # b's attributes are not visible to the guards: the plan checks its tensors
        return x * b.t

    f = kiln.compile(lambda x: helper(box, x).sum())
    x = kiln.full((3,), 2.0)
    f(x)
    box.t.requires_grad_(True)
    f(x).backward()
    np.testing.assert_array_equal(arr(box.t.grad), 2.0)


def test_closure_numpy_array_mutated_in_place():
    weights = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    f = kiln.compile(lambda x: x * kiln.tensor(weights))  # the tensor is built from the array while tracing
    np.testing.assert_allclose(arr(f(X)), arr(X) * weights)
    weights[0] = 100.0
    np.testing.assert_allclose(arr(f(X)), arr(X) * weights)


def test_module_private_attribute_changed():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self._scale = 2.0  # a leading underscore: not a "public" attribute, still read by forward

        def forward(self, x):
            return x * self._scale

    net = Net()
    for f in (kiln.compile(net), kiln.compile(lambda x: net(x))):
        net._scale = 2.0
        np.testing.assert_allclose(arr(f(X)), arr(X) * 2.0)
        net._scale = 5.0
        np.testing.assert_allclose(arr(f(X)), arr(X) * 5.0)


def test_explain_names_the_guarded_value_that_changed_and_warns_when_it_keeps_changing():
    cfg = types.SimpleNamespace(lr=0.1)
    flags = {"on": True}
    f = kiln.compile(lambda x: x * cfg.lr if flags["on"] else x)
    f(X)
    cfg.lr = 0.2
    f(X)
    flags["on"] = False
    f(X)
    text = f.explain()
    assert "`cfg.lr` changed: 0.1 -> 0.2" in text, text
    assert "`flags['on']` changed: True -> False" in text, text

    g = kiln.compile(lambda x: x * cfg.lr, max_cache_entries=2)
    with pytest.warns(RuntimeWarning, match=r"`cfg\.lr` keeps changing"):
        for step in range(3, 8):
            cfg.lr = step / 10
            g(X)


def test_submodule_hook_reading_a_changing_python_value():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    scale = {"value": 2.0}
    model[0].register_forward_hook(lambda m, args, out: out * scale["value"])  # runs inside the plan
    f = kiln.compile(model)
    x = kiln.randn(3, 4)
    for value in (2.0, -1.0, 0.5):
        scale["value"] = value
        np.testing.assert_allclose(arr(f(x)), arr(model(x)), rtol=1e-6)


def test_rebound_tensor_at_a_reused_address_is_not_mistaken_for_the_old_one():
    import gc

    holder = types.SimpleNamespace(w=kiln.ones(2))
    f = kiln.compile(lambda x: x.reshape(holder.w.shape[0], -1).sum(1))  # only w's shape is read
    for n in (2, 3, 4, 6, 2, 3):
        holder.w = None
        gc.collect()
        holder.w = kiln.ones(n)  # often lands where the last one was freed
        x = kiln.arange(12.0)
        np.testing.assert_allclose(arr(f(x)), arr(x.reshape(n, -1).sum(1)))
