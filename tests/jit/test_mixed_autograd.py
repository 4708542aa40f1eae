"""Compiled calls inside larger eager autograd graphs: grads flow in and out of the plan."""
from __future__ import annotations

import numpy as np

import kiln
from kiln import nn


def test_grads_flow_through_eager_code_before_and_after_a_compiled_call():
    kiln.manual_seed(0)
    inner = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    compiled = kiln.compile(inner)
    w_pre = kiln.randn(4, requires_grad=True)
    w_post = kiln.randn(3, requires_grad=True)
    x = kiln.randn(5, 4)

    def run(model):
        h = x * w_pre  # eager, before
        out = model(h)
        return ((out * w_post).sin() ** 2).sum()  # eager, after

    grads = {}
    for name, model in (("eager", inner), ("compiled", compiled)):
        for _ in range(2):  # trace call, then replay
            inner.zero_grad()
            w_pre.grad = w_post.grad = None
            run(model).backward()
        grads[name] = [w_pre.grad.numpy().copy(), w_post.grad.numpy().copy()] + \
                      [p.grad.numpy().copy() for p in inner.parameters()]
    for a, b in zip(grads["compiled"], grads["eager"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert compiled.stats.hits == 1


def test_only_some_outputs_used_in_the_loss():
    def two(x, w):
        return x @ w, (x * 2).sum()

    f = kiln.compile(two)
    x, w = kiln.randn(3, 4), kiln.randn(4, 2, requires_grad=True)
    for _ in range(2):
        w.grad = None
        a, _ = f(x, w)
        a.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.tile(x.numpy().sum(0)[:, None], (1, 2)), rtol=1e-5)


def test_backward_twice_without_retain_graph_raises():
    f = kiln.compile(lambda x: (x * x).sum())
    x = kiln.randn(3, requires_grad=True)
    f(x)
    out = f(x)
    out.backward()
    try:
        out.backward()
    except RuntimeError as exc:
        assert "second time" in str(exc)
    else:
        raise AssertionError("a second backward through a compiled graph must raise")
