"""trace(): the one tracing helper behind compile, djit, xpr and ONNX export, and the Tracer it drives."""
from __future__ import annotations

import warnings
import weakref

import numpy as np
import pytest

import kiln
from kiln.jit.trace import GraphBreakError, trace, user_stacklevel


def test_each_distinct_tensor_leaf_is_one_arg_input_named_by_its_leaf_index():
    x, y = kiln.randn(3), kiln.randn(3)
    traced = trace(lambda a, pair, k=None: a + pair[0] * pair[1] + k, (x, (y, x)), {"k": y})
    specs = [(s.kind, s.ref) for s in traced.graph.specs if s.kind == "arg"]
    assert specs == [("arg", 0), ("arg", 1)]  # x at leaf 0, y at leaf 1; the repeats are the same inputs
    assert traced.leaf_of_tensor == {id(x): 0, id(y): 1}
    np.testing.assert_allclose(traced.result.numpy(), (x + y * x + y).numpy())


def test_the_result_is_the_real_result_and_its_tensor_leaves_are_the_outputs():
    x = kiln.randn(2, 3)
    traced = trace(lambda a: {"sum": a.sum(), "n": 3, "rows": [a * 2]}, (x,))
    assert traced.result["n"] == 3
    assert len(traced.graph.outputs) == 2
    assert [type(v).__name__ for v in traced.out_leaves] == ["Tensor", "int", "Tensor"]


def test_dynamic_dims_become_symbols_in_the_graph():
    x = kiln.randn(5, 4)
    traced = trace(lambda a: a.reshape(a.shape[0], 2, 2).sum(-1), (x,), dynamic={0: {0: "B"}})
    assert "f32[B,2,2]" in traced.graph.to_text()
    assert traced.tracer.symbolic


def test_a_module_adds_its_parameters_and_buffers_as_named_inputs():
    m = kiln.nn.Sequential(kiln.nn.Linear(3, 2), kiln.nn.BatchNorm1d(2))
    traced = trace(m, (kiln.randn(4, 3),), module=m)
    named = {(s.kind, s.name) for s in traced.graph.specs if s.kind in ("param", "buffer")}
    assert ("param", "0.weight") in named and ("buffer", "1.running_mean") in named


def test_no_grad_traces_without_recording_gradients():
    x = kiln.randn(3, requires_grad=True)
    assert trace(lambda a: a * 2, (x,)).result.requires_grad
    assert not trace(lambda a: a * 2, (x,), no_grad=True).result.requires_grad


def test_data_dependent_python_is_recorded_or_raised_with_fullgraph():
    x = kiln.randn(3)

    def f(a):
        return a * 2 if a.sum() > 0 else a

    branched = trace(f, (x,)).tracer
    assert branched.graph_break is None and [truth for _, truth, _ in branched.branches] == [x.sum().item() > 0]
    assert "data-dependent" in trace(lambda a: a * a.sum().item(), (x,)).tracer.graph_break
    with pytest.raises(GraphBreakError, match="test_trace.py"):
        trace(f, (x,), fullgraph=True)


def test_outside_tensors_read_as_python_values_are_recorded_with_version_and_value():
    t = kiln.tensor([2.0])
    traced = trace(lambda a: a * t.item(), (kiln.ones(3),))
    [(tensor, version, value)] = traced.tracer.concretized
    assert tensor is t and version == t._version and value.tolist() == [2.0]
    assert traced.tracer.graph_break is None  # a guard, not a break
    t.mul_(2)
    assert value.tolist() == [2.0]  # a copy: the later change does not reach the record


def test_captured_tensors_are_inputs_read_by_reference():
    w = kiln.randn(3)
    traced = trace(lambda a: a * w, (kiln.ones(3),))
    [captured] = [s for s in traced.graph.specs if s.kind == "captured"]
    assert captured.ref is w


def test_in_place_updates_of_inputs_become_state_writes():
    x = kiln.zeros(3)
    traced = trace(lambda a: a.add_(1.0), (x,))
    assert [w.kind for w in traced.graph.state_writes] == ["arg"]


def test_user_stacklevel_points_at_the_first_frame_outside_kiln():
    def warn_from_here():
        warnings.warn("here", RuntimeWarning, stacklevel=user_stacklevel())

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        warn_from_here()
    assert record[0].filename == __file__  # this test file called it: no kiln frame in between


def test_the_compiling_call_holds_only_what_its_graph_needs():
    # the tracer holds traced tensors weakly and autograd nodes keep only what their VJPs read, so an
    # intermediate no VJP reads is freed during the traced call, as in eager mode; the compiled backward,
    # derived from the trace afterwards, is still right
    made = []

    class Net(kiln.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = kiln.nn.Linear(4, 4)

        def forward(self, x):
            a = self.lin(x)
            made.append(weakref.ref(a))
            return kiln.relu(a) * 2.0  # relu reads its output, not `a`

    kiln.manual_seed(0)
    eager, compiled = Net(), Net()
    compiled.load_state_dict(eager.state_dict())
    run = kiln.compile(compiled)
    x = kiln.randn(3, 4)
    for _ in range(2):  # the compiling call, then the plan
        made.clear()
        out = run(x)
        assert made == [] or made[0]() is None
        out.square().sum().backward()
        eager(x).square().sum().backward()
        for p, q in zip(compiled.parameters(), eager.parameters()):
            np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
