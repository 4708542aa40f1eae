"""Footguns around outputs and aliasing: kept results, views, repeated and in-out tensors, in-place updates."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln import nn


def arr(t):
    return t.detach().numpy().copy()


# ---- a returned tensor kept across calls is never overwritten -------------------------------


def test_kept_inference_outputs_survive_later_calls():
    f = kiln.compile(lambda x: (x * 2 + 1, (x * x).sum(0)))
    kept = []
    for k in range(5):
        kept.append((f(kiln.full((3, 4), float(k))), k))
    assert f.stats.hits == 4
    for (a, b), k in kept:
        np.testing.assert_array_equal(a.numpy(), np.full((3, 4), 2.0 * k + 1))
        np.testing.assert_array_equal(b.numpy(), np.full((4,), 3.0 * k * k))


def test_kept_outputs_that_are_views_survive_later_calls():
    # transposes, slices and reshapes of intermediates: the views' bases must not be reused
    f = kiln.compile(lambda x: ((x * 3).T, (x + 1)[1:, ::2], (x - 1).reshape(-1)))
    outs = [(f(kiln.full((3, 4), float(k))), k) for k in range(4)]
    for (t, s, r), k in outs:
        np.testing.assert_array_equal(t.numpy(), np.full((4, 3), 3.0 * k))
        np.testing.assert_array_equal(s.numpy(), np.full((2, 2), k + 1.0))
        np.testing.assert_array_equal(r.numpy(), np.full((12,), k - 1.0))


def test_kept_training_outputs_and_their_grads_survive_later_calls():
    kiln.manual_seed(0)
    model = nn.Linear(4, 3)
    f = kiln.compile(lambda x: (model(x).tanh(), model(x).T))
    xs = [kiln.randn(2, 4) for _ in range(4)]
    outs = [f(x) for x in xs]  # all four kept alive, backward later
    assert f.stats.hits == 3
    for x, (y, yt) in zip(xs, outs):
        ref = model(x).tanh()
        np.testing.assert_allclose(arr(y), arr(ref), rtol=1e-6)
        np.testing.assert_allclose(arr(yt), arr(model(x)).T, rtol=1e-6)
    for x, (y, yt) in zip(xs, outs):  # backward of an old call uses that call's residuals
        model.zero_grad()
        (y * y).sum().backward()
        got = arr(model.weight.grad)
        model.zero_grad()
        ref = model(x).tanh()
        (ref * ref).sum().backward()
        np.testing.assert_allclose(got, arr(model.weight.grad), rtol=1e-5, atol=1e-6)


def test_mutating_a_returned_tensor_does_not_leak_into_the_next_call():
    w = kiln.ones(3)
    f = kiln.compile(lambda x: (x + 0.0, w * 1.0, w))
    x = kiln.ones(3)
    a, b, c = f(x)
    a.add_(10.0)
    b.add_(10.0)
    a2, b2, c2 = f(x)
    np.testing.assert_array_equal(a2.numpy(), 1.0)
    np.testing.assert_array_equal(b2.numpy(), 1.0)
    np.testing.assert_array_equal(x.numpy(), 1.0)
    assert c2 is w or np.array_equal(c2.numpy(), w.numpy())


# ---- the same tensor passed twice, and an input that is also an output ------------------------


def test_same_tensor_twice_with_grads_equals_eager():
    def fn(a, b):
        return (a * b + a.exp() - b).sum()

    f = kiln.compile(fn)
    x = kiln.randn(5, requires_grad=True)
    for _ in range(3):
        x.grad = None
        f(x, x).backward()
        got = arr(x.grad)
        x.grad = None
        fn(x, x).backward()
        np.testing.assert_allclose(got, arr(x.grad), rtol=1e-6)
    # two distinct tensors with equal values are a different plan and get separate grads
    y = x.detach().clone().requires_grad_()
    x.grad = None
    f(x, y).backward()
    np.testing.assert_allclose(arr(x.grad), arr(y).copy() + np.exp(arr(y)), rtol=1e-6)
    np.testing.assert_allclose(arr(y.grad), arr(x) - 1.0, rtol=1e-6)
    assert f.stats.misses == 2


def test_same_tensor_twice_with_in_place_update_of_one_name():
    def fn(a, b):
        a.mul_(2.0)  # b sees the update too: they are the same tensor
        return a + b

    f = kiln.compile(fn)
    x, xe = kiln.ones(3), kiln.ones(3)
    for _ in range(3):
        np.testing.assert_array_equal(f(x, x).numpy(), fn(xe, xe).numpy())
        np.testing.assert_array_equal(x.numpy(), xe.numpy())


def test_input_returned_as_output_keeps_identity_and_grads():
    f = kiln.compile(lambda x, y: (x, y * 2, x))
    x = kiln.randn(3, requires_grad=True)
    y = kiln.randn(3, requires_grad=True)
    for _ in range(3):
        a, b, c = f(x, y)
        assert a is x and c is x
        x.grad = None
        y.grad = None
        (a.sum() + b.sum() + (c * c).sum()).backward()
        np.testing.assert_allclose(arr(x.grad), 1.0 + 2.0 * arr(x), rtol=1e-6)
        np.testing.assert_allclose(arr(y.grad), 2.0)


def test_input_updated_in_place_and_returned():
    def fn(x):
        x.mul_(2.0).add_(1.0)
        return x, x * 10

    f = kiln.compile(fn)
    x, xe = kiln.ones(2), kiln.ones(2)
    for _ in range(4):
        before = x._version
        (a, b), (ae, be) = f(x), fn(xe)
        assert a is x and x._version > before  # every call bumps the version
        np.testing.assert_array_equal(b.numpy(), be.numpy())
        np.testing.assert_array_equal(x.numpy(), xe.numpy())


# ---- in-place updates on inputs and on buffers happen on every call ------------------------


def test_in_place_updates_of_inputs_every_call_with_versions():
    def step(x, acc):
        acc.add_(x * x)
        x.sub_(0.5)
        return acc.sum()

    f = kiln.compile(step)
    x, acc = kiln.arange(4.0), kiln.zeros(4)
    xe, acce = kiln.arange(4.0), kiln.zeros(4)
    for _ in range(6):
        np.testing.assert_allclose(f(x, acc).numpy(), step(xe, acce).numpy())
    np.testing.assert_allclose(acc.numpy(), acce.numpy())
    np.testing.assert_allclose(x.numpy(), xe.numpy())
    assert x._version >= 6 and acc._version >= 6 and f.stats.hits == 5


def _through_view_of_input(x):
    x[1:].add_(1.0)  # writes through a view into x
    return x.sum()


def _base_updated_under_a_view(x):
    v = x[1:]
    x.mul_(2.0)  # v shares x's memory: it sees the update
    return v * 1.0


def _view_of_intermediate_updated(x):
    y = x * 2.0
    y[:2].add_(1.0)
    y.T  # noqa: B018 - a second view of y, unused
    return y


def _detached_input_updated(x):
    x.detach().add_(1.0)  # detach shares memory with x
    return x + 0.0


def _overlapping_views_as_two_inputs(a, b):
    a.add_(1.0)
    return b * 1.0


@pytest.mark.parametrize("fn, make", [
    (_through_view_of_input, lambda: (kiln.zeros(4),)),
    (_base_updated_under_a_view, lambda: (kiln.arange(4.0),)),
    (_view_of_intermediate_updated, lambda: (kiln.arange(4.0),)),
    (_detached_input_updated, lambda: (kiln.arange(3.0),)),
    (_overlapping_views_as_two_inputs, lambda: (lambda base: (base[:3], base[1:]))(kiln.zeros(4))),
])
def test_in_place_updates_through_views_equal_eager(fn, make):
    f = kiln.compile(fn)
    args, eargs = make(), make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a fallback to eager is allowed
        for _ in range(3):
            np.testing.assert_allclose(arr(f(*args)), arr(fn(*eargs)))
            for a, e in zip(args, eargs):
                np.testing.assert_array_equal(arr(a), arr(e))


class _Counter(nn.Module):
    """A module with a plain buffer updated in place on every forward (like running stats)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", kiln.zeros(()))
        self.register_buffer("total", kiln.zeros(3))

    def forward(self, x):
        self.count.add_(1.0)
        self.total.add_(x.sum(0))
        return x * 2


def test_in_place_buffer_updates_every_call_compiled_equals_eager():
    eager, comp = _Counter(), _Counter()
    f = kiln.compile(comp)
    for i in range(7):
        x = kiln.full((2, 3), float(i))
        np.testing.assert_array_equal(f(x).numpy(), eager(x).numpy())
    np.testing.assert_array_equal(comp.count.numpy(), 7.0)
    np.testing.assert_array_equal(comp.total.numpy(), eager.total.numpy())
    assert comp.count._version == eager.count._version == 7
    assert f.stats.traces == 1


def test_batchnorm_running_stats_in_a_training_plan_with_grads():
    kiln.manual_seed(0)
    eager = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    comp = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    comp.load_state_dict(eager.state_dict())
    f = kiln.compile(comp)
    opt_e = kiln.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = kiln.optim.SGD(comp.parameters(), lr=0.1)
    for _ in range(5):
        x = kiln.randn(8, 4)
        for model, opt in ((eager, opt_e), (f, opt_c)):
            opt.zero_grad()
            (model(x) ** 2).mean().backward()
            opt.step()
    for (name, a), (_, b) in zip(eager.state_dict().items(), comp.state_dict().items()):
        np.testing.assert_allclose(arr(b), arr(a), rtol=1e-5, atol=1e-6, err_msg=name)
    assert f.stats.traces == 1


def test_plan_for_separate_inputs_is_not_reused_for_overlapping_views():
    f = kiln.compile(_overlapping_views_as_two_inputs)
    f(kiln.zeros(3), kiln.zeros(3))  # compiled with a write-back to `a` only
    base, base_e = kiln.zeros(4), kiln.zeros(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(2):
            got = f(base[:3], base[1:])
            want = _overlapping_views_as_two_inputs(base_e[:3], base_e[1:])
            np.testing.assert_array_equal(arr(got), arr(want))
            np.testing.assert_array_equal(arr(base), arr(base_e))


# ---- tensors saved for backward that change before backward runs ----------------------------


def test_input_modified_between_forward_and_backward_raises_like_eager():
    w = kiln.ones(3, requires_grad=True)

    def fn(x):
        return (x * w).sum()

    f = kiln.compile(fn)
    for g in (fn, f, f):  # eager, then a compiled miss and a hit
        x = kiln.full((3,), 2.0)
        out = g(x)
        with kiln.no_grad():
            x.mul_(10.0)  # x is needed for w's gradient
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.backward()


def test_transposed_input_saved_for_backward_and_modified_raises():
    w = kiln.randn(3, 2, requires_grad=True)
    f = kiln.compile(lambda x: (x.T @ w).sum())  # the residual is a view of the input
    f(kiln.randn(3, 4))
    x = kiln.randn(3, 4)
    out = f(x)
    with kiln.no_grad():
        x.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_unmodified_saved_inputs_backward_fine_after_later_calls():
    w = kiln.ones(3, requires_grad=True)
    f = kiln.compile(lambda x: (x * w).sum())
    xs = [kiln.full((3,), float(k)) for k in range(3)]
    outs = [f(x) for x in xs]
    for x, out in zip(xs, outs):
        w.grad = None
        out.backward()
        np.testing.assert_array_equal(arr(w.grad), arr(x))


def test_input_updated_in_place_after_use_gets_the_gradient_of_the_value_it_had():
    w = kiln.ones(3, requires_grad=True)

    def fn(x):
        y = (x * w).sum()  # needs x as it is now
        x.add_(5.0)  # then the function updates its input
        return y

    f = kiln.compile(fn)
    for _ in range(3):
        x = kiln.full((3,), 2.0)
        w.grad = None
        try:
            f(x).backward()
        except RuntimeError as exc:  # eager raises here; raising is fine too, a wrong gradient is not
            assert "modified by an inplace operation" in str(exc)
        else:
            np.testing.assert_array_equal(arr(w.grad), 2.0)
        np.testing.assert_array_equal(arr(x), 7.0)


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_whole_training_step_inside_a_compiled_function_equals_eager(opt_name):
    """backward() and optimizer.step() inside the function update params outside any graph: whatever
    the compiler does with that (a fallback), the trajectory must equal eager's."""
    kiln.manual_seed(0)
    eager, comp = nn.Linear(4, 2), nn.Linear(4, 2)
    comp.load_state_dict(eager.state_dict())
    Opt = getattr(kiln.optim, opt_name)
    opt_e, opt_c = Opt(eager.parameters(), lr=0.05), Opt(comp.parameters(), lr=0.05)

    def step(x, y, model, opt):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    compiled = kiln.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(5):
            x, y = kiln.randn(3, 4), kiln.randn(3, 2)
            np.testing.assert_allclose(arr(compiled(x, y, comp, opt_c)), arr(step(x, y, eager, opt_e)), rtol=1e-6)
    for a, b in zip(eager.parameters(), comp.parameters()):
        np.testing.assert_allclose(arr(b), arr(a), rtol=1e-6, atol=1e-7)
