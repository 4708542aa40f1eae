"""Unit tests of kiln/jit/executor.py: output layouts, inference and training entries, fallback.

Entries are built here by hand (trace, differentiate, lower with a backend) so each test
exercises the executor directly; a few tests go through kiln.compile to check that the
entry the cache holds behaves the same. Every entry test runs on both backends.
"""
from __future__ import annotations

import collections
import dataclasses
import gc
import weakref
from typing import Any, Callable

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.jit.autodiff import differentiate
from kiln.jit.backends import get_backend
from kiln.jit.executor import (CompiledCallBackward, CompiledFunctionBackward, FallbackEntry, InferenceEntry,
                               OutputLayout, TrainingEntry, gather_inputs)
from kiln.jit.ir import Graph, InputSpec, Value
from kiln.jit.output_alias import Source, find_aliases
from kiln.jit.pytree import flatten
from kiln.jit.trace import Tracer

F64 = kiln.float64
BACKENDS = ["interpret", "cpu"]


# ---- helpers --------------------------------------------------------------------------------
def _layout(result: Any, leaves: list) -> OutputLayout:
    """The OutputLayout kiln.compile builds for a function that returned `result` on `leaves`."""
    out_leaves, treedef = flatten(result)
    first_leaf: dict[int, int] = {}
    for i, x in enumerate(leaves):
        if isinstance(x, kiln.Tensor):
            first_leaf.setdefault(id(x), i)
    positions = [i for i, x in enumerate(out_leaves) if isinstance(x, kiln.Tensor)]
    statics = {i: x for i, x in enumerate(out_leaves) if not isinstance(x, kiln.Tensor)}
    sources = [(Source("arg", i), leaves[i]) for i in dict.fromkeys(first_leaf.values())]
    tensors = [out_leaves[p] for p in positions]
    return OutputLayout(treedef, positions, statics, find_aliases(tensors, sources, _graph_of(tensors), {}))


def _graph_of(outputs: list) -> Graph:
    """A graph whose outputs stand for `outputs` (no nodes: none is a view in it)."""
    return Graph(outputs=[Value(tuple(t.shape), t.dtype) for t in outputs])


def _trace(fn: Callable, args: tuple, grad: bool) -> tuple[Tracer, Any, list]:
    leaves = list(args)
    tracer = Tracer(fullgraph=True)
    seen: set[int] = set()
    for i, x in enumerate(leaves):
        if isinstance(x, kiln.Tensor) and id(x) not in seen:
            seen.add(id(x))
            tracer.add_input(x, InputSpec("arg", i))
    with tracer, kiln.set_grad_enabled(grad):
        result = fn(*args)
    tracer.set_outputs([t for t in flatten(result)[0] if isinstance(t, kiln.Tensor)])
    return tracer, result, leaves


def inference_entry(fn: Callable, args: tuple, backend: str) -> InferenceEntry:
    tracer, result, leaves = _trace(fn, args, grad=False)
    _, lower = get_backend(backend)
    return InferenceEntry(tracer.graph, lower(tracer.graph), _layout(result, leaves), kiln.device("cpu"))


def training_entry(fn: Callable, args: tuple, backend: str) -> TrainingEntry:
    tracer, result, leaves = _trace(fn, args, grad=True)
    d = differentiate(tracer.graph, tracer.real, tracer.symbolic)
    _, lower = get_backend(backend)
    requires = [v.id in tracer.graph.requires_grad for v in tracer.graph.outputs]
    return TrainingEntry(d.forward, lower(d.forward), d.backward, lower(d.backward), d.n_outputs,
                         d.cotangent_outputs, d.grad_inputs, requires, _layout(result, leaves), kiln.device("cpu"))


def leaf(shape: tuple, seed: int = 0, grad: bool = True) -> kiln.Tensor:
    data = np.random.default_rng(seed).standard_normal(shape)
    return kiln.tensor(data, dtype=F64, requires_grad=grad)


def arr(t: kiln.Tensor) -> np.ndarray:
    return t.detach().numpy()


# ---- OutputLayout ---------------------------------------------------------------------------
Pair = collections.namedtuple("Pair", "first second")


@dataclasses.dataclass
class Result:
    loss: Any
    extras: Any
    tag: str = "r"


def _structures(x: kiln.Tensor, y: kiln.Tensor) -> dict[str, Any]:
    return {
        "tuple": (x, y),
        "list": [y, 3, x],
        "dict": {"b": x, "a": (y, None)},
        "namedtuple": Pair(x, [y, "s"]),
        "dataclass": Result(x, {"k": y, "n": 2.5}),
        "nested_statics": (1, ("two", None), [x]),
    }


@pytest.mark.parametrize("kind", sorted(_structures(kiln.zeros(1), kiln.zeros(1))))
def test_output_layout_rebuilds_the_pytree_with_new_tensors(kind):
    x, y = kiln.ones(2), kiln.zeros(3)
    result = _structures(x, y)[kind]
    layout = _layout(result, [])
    assert not layout.aliases and not layout.single
    new = [kiln.full((k + 1,), float(k)) for k in range(len(layout.tensor_slots))]
    rebuilt = layout.build(new, [])
    assert type(rebuilt) is type(result)
    got_leaves, got_def = flatten(rebuilt)
    want_leaves, want_def = flatten(result)
    assert got_def == want_def
    tensors = iter(new)
    for got, want in zip(got_leaves, want_leaves):
        if isinstance(want, kiln.Tensor):
            assert got is next(tensors)
        else:
            assert got == want and type(got) is type(want)


def test_output_layout_single_tensor():
    x = kiln.ones(2)
    layout = _layout(x * 2, [x])
    assert layout.single
    t = kiln.zeros(2)
    assert layout.build([t], [x]) is t


def test_output_layout_single_output_that_is_an_argument():
    x, y = kiln.ones(2), kiln.zeros(2)
    layout = _layout(y, [x, y])
    assert layout.single and layout.aliases.by_identity == {0: Source("arg", 1)}
    assert layout.build([kiln.zeros(2)], [x, y]) is y


def test_output_layout_outputs_aliasing_arguments_come_back_as_the_arguments():
    x, y = kiln.ones(2), kiln.zeros(2)
    result = {"same": x, "new": x + y, "again": (y, x)}
    layout = _layout(result, [x, 5, y])
    assert layout.aliases.by_identity == {0: Source("arg", 0), 2: Source("arg", 2), 3: Source("arg", 0)}
    x2, y2 = kiln.ones(2), kiln.ones(2)
    fresh = [kiln.zeros(2) for _ in range(4)]
    rebuilt = layout.build(fresh, [x2, 5, y2])
    assert rebuilt["same"] is x2 and rebuilt["again"][0] is y2 and rebuilt["again"][1] is x2
    assert rebuilt["new"] is fresh[1]
    assert list(rebuilt) == ["same", "new", "again"]


def test_output_layout_without_tensors():
    layout = _layout((1, "a", None), [])
    assert layout.build([], []) == (1, "a", None)


# ---- InferenceEntry -------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_entry_runs_the_lowered_plan_on_new_inputs(backend):
    def fn(x, w):
        h = (x @ w).relu() * 2.0 + 1.0
        return {"h": h, "s": h.sum(1), "tag": "ok"}

    x, w = leaf((3, 4), grad=False), leaf((4, 2), 1, grad=False)
    entry = inference_entry(fn, (x, w), backend)
    assert entry.kind == "inference" and entry.plan.backend == backend
    x2, w2 = leaf((3, 4), 5, grad=False), leaf((4, 2), 6, grad=False)
    out = entry.run([x2, w2], None)
    want = fn(x2, w2)
    assert out["tag"] == "ok"
    np.testing.assert_allclose(arr(out["h"]), arr(want["h"]), rtol=1e-12)
    np.testing.assert_allclose(arr(out["s"]), arr(want["s"]), rtol=1e-12)
    assert not out["h"].requires_grad and out["h"].grad_fn is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_entry_writes_state_on_every_call(backend):
    buf = kiln.zeros(3, dtype=F64)

    def fn(x):
        buf.add_(x)  # a captured tensor updated in place: a state write
        return buf * 1.0

    x = kiln.ones(3, dtype=F64)
    entry = inference_entry(fn, (x,), backend)
    assert len(entry.graph.state_writes) == 1
    np.testing.assert_array_equal(arr(buf), np.ones(3))  # the trace ran the function once
    version = buf._version
    for k in range(2, 5):
        out = entry.run([x], None)
        np.testing.assert_array_equal(arr(buf), np.full(3, float(k)))
        np.testing.assert_array_equal(arr(out), np.full(3, float(k)))
    assert buf._version == version + 3  # each write bumps the version, as eager add_ does


@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_outputs_never_alias_memory_a_later_call_reuses(backend):
    buf = kiln.zeros(3, dtype=F64)
    const = kiln.tensor([1.0, 2.0, 3.0], dtype=F64)

    def fn(x):
        buf.add_(x)
        new = buf * 1.0
        return new, buf, const, x * 2.0, (x * 2.0).reshape(3, 1)

    x = kiln.ones(3, dtype=F64)
    entry = inference_entry(fn, (x,), backend)
    first = entry.run([x], None)
    kept = [arr(t).copy() for t in first]
    second = entry.run([kiln.full((3,), 5.0, dtype=F64)], None)
    for t, before in zip(first, kept):
        np.testing.assert_array_equal(arr(t), before)
    for a in first:
        for b in second:
            assert not np.shares_memory(arr(a), arr(b))
        assert not np.shares_memory(arr(a), arr(buf)) or a is buf
    # a captured tensor that is returned comes back as a copy: changing it does not change const
    first[2].add_(1.0)
    np.testing.assert_array_equal(arr(const), [1.0, 2.0, 3.0])


# ---- TrainingEntry: gradients and the autograd node -------------------------------------------
def _loss_fn(x, w, b):
    h = (x @ w + b).tanh()
    return h, (h * h).sum(), h.argmax(1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_entry_grads_equal_eager(backend):
    x, w, b = leaf((3, 4)), leaf((4, 2), 1), leaf((2,), 2, grad=False)
    entry = training_entry(_loss_fn, (x, w, b), backend)
    assert entry.kind == "training" and entry.grad_inputs == [0, 1]
    x2, w2 = leaf((3, 4), 7), leaf((4, 2), 8)
    h, loss, idx = entry.run([x2, w2, b], None)
    u = kiln.tensor(np.random.default_rng(3).standard_normal((3, 2)))
    (h * u).sum().backward(retain_graph=True)
    loss.backward()
    got = [arr(x2.grad), arr(w2.grad)]
    x2.grad = w2.grad = None
    eh, eloss, eidx = _loss_fn(x2, w2, b)
    np.testing.assert_array_equal(arr(idx), arr(eidx))
    (eh * u).sum().backward(retain_graph=True)
    eloss.backward()
    np.testing.assert_allclose(got[0], arr(x2.grad), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got[1], arr(w2.grad), rtol=1e-12, atol=1e-14)
    assert b.grad is None
    assert not idx.requires_grad and idx.grad_fn is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_backward_plan_run_for_all_outputs(backend):
    x, w, b = leaf((3, 4)), leaf((4, 2), 1), leaf((2,), 2)
    entry = training_entry(_loss_fn, (x, w, b), backend)
    runs = []
    plan_run = entry.backward_plan.run
    entry.backward_plan.run = lambda *a: runs.append(1) or plan_run(*a)
    h, loss, _ = entry.run([x, w, b], None)
    (h.sum() * 3.0 + loss).backward()
    assert len(runs) == 1
    # an output that takes no part in the loss gets a zero cotangent
    x.grad = w.grad = b.grad = None
    h, loss, _ = entry.run([x, w, b], None)
    loss.backward()
    got = arr(x.grad)
    x.grad = w.grad = b.grad = None
    _loss_fn(x, w, b)[1].backward()
    np.testing.assert_allclose(got, arr(x.grad), rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grad_fn_of_compiled_outputs_reads_like_pytorch(backend):
    x, w, b = leaf((3, 4)), leaf((4, 2), 1), leaf((2,), 2, grad=False)
    entry = training_entry(_loss_fn, (x, w, b), backend)
    h, loss, _ = entry.run([x, w, b], None)
    for i, t in enumerate((h, loss)):
        node = t.grad_fn
        assert isinstance(node, CompiledFunctionBackward) and isinstance(node, kiln.autograd.Node)
        assert type(node).__name__ == "CompiledFunctionBackward"  # as type(torch_out.grad_fn).__name__
        assert node.name() == "CompiledFunctionBackward"
        assert repr(node) == "<CompiledFunctionBackward>"  # kiln's style, as <MulBackward>
        assert node.output_nr == i
    assert "grad_fn=<CompiledFunctionBackward>" in repr(loss)  # PyTorch prints exactly this
    # the outputs of one call: distinct nodes (kiln's nodes have one output each), one shared call
    assert h.grad_fn is not loss.grad_fn
    call = h.grad_fn.call
    assert call is loss.grad_fn.call and call is h.grad_fn.edges[0]
    assert isinstance(call, CompiledCallBackward) and call.name() == "CompiledFunctionCallBackward"
    assert call.inputs == (x, w) and call.edges == (None, None)  # leaves that require grad


def test_grad_fn_on_the_traced_call_and_on_replays_through_compile():
    f = kiln.compile(lambda x: (x * 2).sum())
    x = kiln.randn(3, requires_grad=True)
    assert f(x).grad_fn.name() == "SumBackward"  # the trace call runs eagerly
    y = f(x)
    assert y.grad_fn.name() == "CompiledFunctionBackward"
    assert repr(y.grad_fn) == "<CompiledFunctionBackward>"
    # the grad_fn of eager code after a compiled call leads back into it
    z = y * 3.0
    assert z.grad_fn.name() == "MulBackward" and z.grad_fn.edges[0] is y.grad_fn


def test_the_call_node_takes_non_leaf_inputs_from_eager_code():
    f = kiln.compile(lambda h: (h * h).sum())
    x = kiln.randn(3, requires_grad=True)
    f(x.exp())
    h = x.exp()
    y = f(h)
    assert y.grad_fn.call.edges == (h.grad_fn,)
    y.backward()
    np.testing.assert_allclose(arr(x.grad), 2 * np.exp(2 * arr(x)), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_backward_twice_needs_retain_graph(backend):
    x = leaf((3,))
    entry = training_entry(lambda x: x.sin().sum(), (x,), backend)
    y = entry.run([x], None)
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(arr(x.grad), 2 * np.cos(arr(x)), rtol=1e-12)
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_grad_run_attaches_no_node(backend):
    x = leaf((3,))
    entry = training_entry(lambda x: x.sin().sum(), (x,), backend)
    with kiln.no_grad():
        y = entry.run([x], None)
    assert y.grad_fn is None and not y.requires_grad
    np.testing.assert_allclose(arr(y), np.sin(arr(x)).sum(), rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_residuals_are_freed_by_a_backward_without_retain_graph(backend):
    # regression: the residuals were kept in the call node's params, which stay reachable from
    # the outputs (grad_fn.edges), so every activation of a step lived as long as its loss did;
    # eager frees its saved tensors after backward
    x = leaf((50,))
    entry = training_entry(lambda x: (x.exp() * x.sin()).sum(), (x,), backend)
    y = entry.run([x], None)
    (arrays, _, _), _, _ = y.grad_fn.call.output()._compiled_saved
    owned = [weakref.ref(a) for a in arrays if a.base is None and a is not x._data]
    assert owned, "the forward plan should save an intermediate (exp(x)) for the backward"
    del arrays
    y.backward()
    gc.collect()
    assert all(r() is None for r in owned)
    np.testing.assert_allclose(arr(x.grad), np.exp(arr(x)) * (np.sin(arr(x)) + np.cos(arr(x))), rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_residuals_live_while_the_graph_is_retained(backend):
    x = leaf((4,))
    entry = training_entry(lambda x: x.exp().sum(), (x,), backend)
    y = entry.run([x], None)
    y.backward(retain_graph=True)
    gc.collect()
    y.backward()
    np.testing.assert_allclose(arr(x.grad), 2 * np.exp(arr(x)), rtol=1e-12)


# ---- TrainingEntry: in-place changes before backward ----------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_modifying_an_input_before_backward_raises_like_eager(backend):
    w = leaf((3,), grad=False)
    x = leaf((3,), 1)
    entry = training_entry(lambda x, w: (x * w).sum(), (x, w), backend)
    y = entry.run([x, w], None)
    w.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as compiled:
        y.backward()
    assert "is at version 1; expected version 0" in str(compiled.value)
    ey = (x * w).sum()
    w.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        ey.backward()


@pytest.mark.parametrize("backend", BACKENDS)
def test_modifying_an_input_through_a_view_before_backward_raises(backend):
    w = leaf((2, 3), grad=False)
    x = leaf((3,), 1)
    entry = training_entry(lambda x, w: (x * w).sum(), (x, w), backend)
    y = entry.run([x, w], None)
    w[0].add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


@pytest.mark.parametrize("backend", BACKENDS)
def test_modifying_an_input_the_backward_does_not_read_is_fine(backend):
    x, c = leaf((3,)), leaf((3,), 1, grad=False)
    entry = training_entry(lambda x, c: (x * 2.0 + c).sum(), (x, c), backend)
    y = entry.run([x, c], None)
    c.add_(1.0)
    y.backward()
    np.testing.assert_allclose(arr(x.grad), np.full(3, 2.0))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["exp", "tanh", "sigmoid"])
def test_modifying_an_output_the_backward_reads_raises_like_eager(backend, op):
    # regression: exp/tanh/sigmoid's backward reads the output itself; the compiled output was
    # the very array saved for the backward, so y.add_(1) silently changed the gradient
    x = leaf((4,))
    fn = lambda x: getattr(x, op)()  # noqa: E731
    entry = training_entry(fn, (x,), backend)
    y = entry.run([x], None)
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as compiled:
        y.sum().backward()
    assert "output 0 of a compiled call" in str(compiled.value)
    ey = fn(x)
    ey.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        ey.sum().backward()


@pytest.mark.parametrize("backend", BACKENDS)
def test_modifying_an_output_through_a_view_raises(backend):
    x = leaf((2, 3))
    entry = training_entry(lambda x: (x.exp(), x.sum()), (x,), backend)
    y, s = entry.run([x], None)
    with kiln.no_grad():  # (with grad on, kiln refuses in-place ops on views of graph tensors)
        y[1].mul_(0.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        (y.sum() + s).backward()


@pytest.mark.parametrize("backend", BACKENDS)
def test_modifying_an_output_the_backward_does_not_read_is_fine(backend):
    x = leaf((4,))
    entry = training_entry(lambda x: (x * 3.0, x.sin()), (x,), backend)
    a, b = entry.run([x], None)
    a.add_(1.0)  # mul by a constant saves nothing of its output
    b.detach().mul_(2.0)  # (a detached view shares b's version counter, as in eager)
    (a.sum() + b.sum()).backward()
    np.testing.assert_allclose(arr(x.grad), 3.0 + np.cos(arr(x)), rtol=1e-12)


def test_modifying_a_compiled_output_before_backward_raises_through_compile():
    f = kiln.compile(lambda x: x.tanh())
    x = kiln.randn(4, requires_grad=True)
    f(x)
    y = f(x)
    assert f.stats.hits == 1
    y.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


# ---- TrainingEntry: create_graph, state, aliasing ------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_create_graph_grads_require_grad_and_refuse_double_backward(backend):
    x = leaf((3,))
    entry = training_entry(lambda x: (x.sin() * x).sum(), (x,), backend)
    y = entry.run([x], None)
    (g,) = kiln.autograd.grad(y, x, create_graph=True)
    np.testing.assert_allclose(arr(g), np.sin(arr(x)) + arr(x) * np.cos(arr(x)), rtol=1e-12)
    assert g.requires_grad
    assert g.grad_fn.name() == "CompiledFunctionBackwardBackward"  # PyTorch's name for it
    with pytest.raises(RuntimeError, match="double backward"):
        (g * g).sum().backward()
    # without create_graph the grads are plain tensors
    (g2,) = kiln.autograd.grad(entry.run([x], None), x)
    assert not g2.requires_grad and g2.grad_fn is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_entry_writes_state_on_every_call(backend):
    bn = nn.BatchNorm1d(3).double()
    x = leaf((5, 3))

    def fn(x):
        return bn(x).sum()

    eager_bn = nn.BatchNorm1d(3).double()
    eager_bn.load_state_dict(bn.state_dict())
    eager_bn(x)  # the trace below runs bn once too
    entry = training_entry(fn, (x,), backend)
    assert entry.graph.state_writes
    for k in range(3):
        xk = leaf((5, 3), 10 + k)
        entry.run([xk], None).backward()
        eager_bn(xk)
        np.testing.assert_allclose(arr(bn.running_mean), arr(eager_bn.running_mean), rtol=1e-12)
        np.testing.assert_allclose(arr(bn.running_var), arr(eager_bn.running_var), rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_residual_of_an_input_the_call_writes_keeps_the_value_the_forward_used(backend):
    buf = kiln.tensor([1.0, 2.0, 3.0], dtype=F64)

    def fn(x):
        y = (x * buf).sum()  # the backward reads buf as it was here...
        buf.add_(10.0)  # ...and the call then writes it
        return y

    x = leaf((3,))
    entry = training_entry(fn, (x,), backend)
    before = arr(buf).copy()
    y = entry.run([x], None)
    np.testing.assert_array_equal(arr(buf), before + 10.0)
    y.backward()
    np.testing.assert_array_equal(arr(x.grad), before)


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_outputs_never_alias_memory_a_later_call_reuses(backend):
    x, w = leaf((3, 4)), leaf((4, 2), 1)

    def fn(x, w):
        h = (x @ w).exp()
        return h, h.sum(), h.t()

    entry = training_entry(fn, (x, w), backend)
    first = entry.run([x, w], None)
    kept = [arr(t).copy() for t in first]
    second = entry.run([leaf((3, 4), 5), w], None)
    for t, before in zip(first, kept):
        np.testing.assert_array_equal(arr(t), before)
    for a in first:
        for b in second:
            assert not np.shares_memory(arr(a), arr(b))
    # both graphs still backpropagate to their own inputs
    first[1].backward()
    np.testing.assert_allclose(arr(w.grad), arr(x).T @ kept[0], rtol=1e-12)


def test_an_output_that_is_an_argument_is_the_argument():
    x = leaf((3,))
    entry = training_entry(lambda x: (x, x * 2.0), (x,), "interpret")
    same, double = entry.run([x], None)
    assert same is x and same.grad_fn is None
    double.sum().backward()
    np.testing.assert_allclose(arr(x.grad), np.full(3, 2.0))


# ---- gather_inputs ----------------------------------------------------------------------------
def test_gather_inputs_reads_params_fresh_and_takes_extra_inputs():
    p = kiln.ones(2)
    specs = [InputSpec("arg", 1), InputSpec("param", p), InputSpec("literal", literal=np.float64(2.0)),
             InputSpec("residual", 0), InputSpec("cotangent", 3)]
    leaves = [None, kiln.zeros(3)]
    res, cot = np.arange(2.0), np.arange(3.0)
    got = gather_inputs(specs, leaves, {"residual": [res], "cotangent": {3: cot}})
    assert got[0] is leaves[1]._data and got[1] is p._data and got[2] == 2.0
    assert got[3] is res and got[4] is cot
    p.add_(1.0)
    assert gather_inputs(specs[1:2], leaves)[0] is p._data


# ---- FallbackEntry ----------------------------------------------------------------------------
def test_fallback_entry_runs_eagerly_with_eager_grad_fns():
    def branchy(x):
        if x.sum() > 0:  # data-dependent Python: a graph break
            return x.exp()
        return x * 2.0

    f = kiln.compile(branchy)
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    with pytest.warns(RuntimeWarning, match="falling back to eager"):
        f(x)
    (entry,) = f.cache_entries
    assert isinstance(entry, FallbackEntry) and entry.kind == "fallback" and entry.graph is None
    assert "data-dependent" in entry.reason
    y = f(x)
    assert f.stats.fallbacks == 1
    assert y.grad_fn.name() == "ExpBackward"  # eager code, eager nodes
    y.sum().backward()
    np.testing.assert_allclose(arr(x.grad), np.exp([1.0, 2.0]), rtol=1e-6)
    assert f(-x).grad_fn.name() == "MulBackward"  # the other branch, also eager
