"""Acceptance 7 and footguns: buffer updates on every call, RNG streams, in-place on inputs, aliasing."""
from __future__ import annotations

import numpy as np

import kiln
from kiln import nn

from jit_helpers import assert_close


def test_batchnorm_running_stats_update_on_every_compiled_call():
    kiln.manual_seed(0)
    eager = nn.BatchNorm2d(3)
    compiled_bn = nn.BatchNorm2d(3)
    compiled_bn.load_state_dict(eager.state_dict())
    f = kiln.compile(compiled_bn)
    for _ in range(10):
        x = kiln.randn(4, 3, 5, 5)
        assert_close(f(x), eager(x))
    assert_close(compiled_bn.running_mean, eager.running_mean)
    assert_close(compiled_bn.running_var, eager.running_var)
    assert f.stats.traces == 1 and f.stats.hits == 9


def test_dropout_masks_differ_between_calls_and_equal_eager_for_same_seed():
    drop = nn.Dropout(0.5)
    f = kiln.compile(drop)
    x = kiln.ones(64)
    kiln.manual_seed(7)
    eager = [drop(x).numpy().copy() for _ in range(3)]
    kiln.manual_seed(7)
    compiled = [f(x).numpy().copy() for _ in range(3)]
    for a, b in zip(eager, compiled):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(compiled[1], compiled[2])
    assert f.stats.hits == 2


def test_random_ops_in_functions_follow_the_global_stream():
    f = kiln.compile(lambda x: x + kiln.randn(*x.shape))
    x = kiln.zeros(5)
    kiln.manual_seed(3)
    eager = [(x + kiln.randn(5)).numpy() for _ in range(3)]
    after_eager = kiln.get_rng_state()
    kiln.manual_seed(3)
    compiled = [f(x).numpy() for _ in range(3)]
    assert kiln.get_rng_state() == after_eager
    for a, b in zip(eager, compiled):
        np.testing.assert_array_equal(a, b)


def test_in_place_update_of_an_input_happens_on_every_call():
    def bump(x):
        x.add_(1.0)
        return x * 2

    f = kiln.compile(bump)
    x = kiln.zeros(3)
    for i in range(1, 4):
        out = f(x)
        np.testing.assert_allclose(x.numpy(), i)
        np.testing.assert_allclose(out.numpy(), 2 * i)


def test_returned_tensor_is_not_overwritten_by_the_next_call():
    f = kiln.compile(lambda x: x * 2)
    a = f(kiln.ones(3))
    b = f(kiln.full((3,), 5.0))
    np.testing.assert_allclose(a.numpy(), 2.0)
    np.testing.assert_allclose(b.numpy(), 10.0)


def test_input_returned_as_output_is_the_same_object():
    f = kiln.compile(lambda x, y: (x, x + y))
    x, y = kiln.ones(2), kiln.ones(2)
    f(x, y)
    out, _ = f(x, y)
    assert out is x


def test_same_tensor_twice_and_non_contiguous_inputs():
    f = kiln.compile(lambda a, b: a * b + a)
    base = kiln.randn(4, 6)
    view = base[:, ::2]  # non-contiguous
    offset = base[1:]  # offset view
    for a, b in ((view, view), (offset, offset), (view.T, view.T)):
        assert_close(f(a, b), a * b + a)


def test_closure_scalar_that_changes_is_guarded():
    k = 2
    f = kiln.compile(lambda x: x * k)
    x = kiln.ones(2)
    np.testing.assert_allclose(f(x).numpy(), 2.0)
    k = 5  # noqa: F841 - read by the lambda
    np.testing.assert_allclose(f(x).numpy(), 5.0)


def test_rebinding_a_global_tensor_is_guarded():
    global _GLOBAL_W
    _GLOBAL_W = kiln.ones(2)
    f = kiln.compile(lambda x: x * _GLOBAL_W)
    x = kiln.ones(2)
    f(x)
    _GLOBAL_W = kiln.full((2,), 3.0)
    np.testing.assert_allclose(f(x).numpy(), 3.0)


def test_module_python_attribute_change_is_guarded_and_setattr_delegates():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.scale = 3.0

        def forward(self, x):
            return self.fc(x) * self.scale

    m = Scaled()
    f = kiln.compile(m)
    x = kiln.randn(3, 2)
    f(x)
    m.scale = 10.0
    assert_close(f(x), m(x))
    f.scale = 1.0  # attribute writes on the JITModule reach the module
    assert m.scale == 1.0
    assert_close(f(x), m(x))


def test_output_that_is_a_constant_is_a_fresh_array_each_call():
    f = kiln.compile(lambda x: (x + 1, kiln.zeros(3)))
    _, z = f(kiln.ones(3))
    z.add_(5.0)
    _, z2 = f(kiln.ones(3))
    np.testing.assert_allclose(z2.numpy(), 0.0)
