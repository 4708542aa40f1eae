"""Value checks run on every compiled replay, not only while tracing.

Eager kiln raises, as PyTorch does, on out-of-range indices (embedding, index_select,
gather, scatter_add, take_along_dim), class targets outside [0, C), and integer division
by zero. Those checks are primitives (kiln/ops/checks.py) whose output the op uses, so
a compiled plan holds them: each test compiles a function on both backends, calls it
with good data (equal to eager), then with bad data (the same exception, the same
message as eager), then with good data again.
"""
from __future__ import annotations

import re
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.jit.backends.cpu import elementwise_groups
from kiln.ops.primitive import REGISTRY, trace_state

BACKENDS = ["interpret", "cpu"]
CHECKS = {"check_index", "check_targets", "check_divisor"}


@pytest.fixture(autouse=True)
def _fuse_small_arrays(monkeypatch):
    """Fuse even tiny arrays on the cpu backend, so the checks sit between generated C kernels."""
    monkeypatch.setattr(elementwise_groups, "MIN_ELEMENTS", 1)


def _values(out: Any) -> list[np.ndarray]:
    outs = out if isinstance(out, (tuple, list)) else [out]
    return [o.detach().numpy() for o in outs]


def _eager_error(fn: Callable, args: tuple) -> BaseException:
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - the error is what we compare against
        return exc
    raise AssertionError("eager did not raise on the bad data")


def _check_replays(fn: Callable, good: tuple, bad: list[tuple], match: str, backend: str,
                   error: type = IndexError, **compile_kw: Any) -> Any:
    """Compile `fn`; good call equals eager; each bad call raises eager's exception and message
    (matching `match` too); a good call afterwards still works and reuses the plan."""
    compiled = kiln.compile(fn, backend=backend, **compile_kw)
    for want, got in zip(_values(fn(*good)), _values(compiled(*good))):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    for args in bad:
        eager = _eager_error(fn, args)
        assert isinstance(eager, error)
        with pytest.raises(type(eager), match=match) as info:
            compiled(*args)
        assert str(info.value) == str(eager)
    for want, got in zip(_values(fn(*good)), _values(compiled(*good))):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert compiled.stats.misses == 1, "the bad calls must run the cached plan, not retrace"
    assert compiled.stats.fallbacks == 0
    nodes = {n.prim.name for g in compiled.graphs() for n in g.nodes}
    assert nodes & CHECKS, f"no check node in the plan: {sorted(nodes)}"
    plans = [getattr(e, "plan", None) or e.forward_plan for e in compiled.cache_entries]
    assert [p.backend for p in plans] == [backend]
    return compiled


def _x(*shape: int) -> kiln.Tensor:
    return kiln.tensor(np.linspace(-1.0, 1.0, int(np.prod(shape))).reshape(shape))


def _i(values: Any) -> kiln.Tensor:
    return kiln.tensor(np.asarray(values, dtype=np.int64))


# ---- indices ---------------------------------------------------------------------------------
INDEX_OPS = [
    pytest.param(lambda x, i: kiln.gather(x, 1, i) * 2 + 1, "gather", id="gather"),
    pytest.param(lambda x, i: x.gather(1, i).exp(), "gather", id="Tensor.gather"),
    pytest.param(lambda x, i: kiln.index_select(x, 1, i.reshape(-1)) * 3, "index_select", id="index_select"),
    pytest.param(lambda x, i: kiln.zeros(2, 3, dtype=x.dtype).scatter_add(1, i, x[:, :1] + 1) * 2,
                 "scatter_add", id="scatter_add"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("fn", "op"), INDEX_OPS)
def test_index_range_is_checked_on_every_replay(fn: Callable, op: str, backend: str) -> None:
    x = _x(2, 3)
    _check_replays(fn, (x, _i([[2], [0]])), [(x, _i([[0], [-1]])), (x, _i([[3], [0]])), (x, _i([[1], [7]]))],
                   rf"{op}: index (-1|3|7) is out of range for dimension 1 with size 3", backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_negative_gather_index_no_longer_wraps_silently(backend: str) -> None:
    """Before the checks were in the graph, a replay read x[:, -1] here and returned a number."""
    compiled = kiln.compile(lambda x, i: kiln.gather(x, 1, i), backend=backend)
    x = _x(2, 3)
    compiled(x, _i([[0], [1]]))
    with pytest.raises(IndexError, match=r"index -1 is out of range .*\(negative indices are not allowed here\)"):
        compiled(x, _i([[0], [-1]]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_take_along_dim_allows_negatives_but_checks_the_range(backend: str) -> None:
    def fn(x: kiln.Tensor, i: kiln.Tensor) -> kiln.Tensor:
        return kiln.take_along_dim(x, i, 1) * 2

    x = _x(2, 3)
    compiled = _check_replays(fn, (x, _i([[-1, 0], [-3, 2]])), [(x, _i([[-4], [0]])), (x, _i([[0], [3]]))],
                              r"take_along_dim: index (-4|3) is out of range .*valid indices: -3 to 2", backend)
    np.testing.assert_array_equal(compiled(x, _i([[-1], [-2]])).numpy(), fn(x, _i([[-1], [-2]])).numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_functional(backend: str) -> None:
    weight = kiln.tensor(np.arange(6.0).reshape(3, 2))

    def fn(idx: kiln.Tensor) -> kiln.Tensor:
        return F.embedding(idx, weight) * 2 + 1

    _check_replays(fn, (_i([[0, 2], [1, 1]]),), [(_i([[0, -1]]),), (_i([[3, 0]]),)],
                   r"embedding: index (-1|3) is out of range for an embedding table of 3 rows "
                   r"\(weight shape \(3, 2\)\); valid indices: 0 to 2", backend)


class TinyLM(kiln.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = kiln.nn.Embedding(5, 4)
        self.head = kiln.nn.Linear(4, 5)

    def forward(self, tokens: kiln.Tensor, targets: kiln.Tensor) -> kiln.Tensor:
        return F.cross_entropy(self.head(self.emb(tokens)).reshape(-1, 5), targets.reshape(-1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("grad", [True, False], ids=["training", "no_grad"])
def test_compiled_module_with_embedding(backend: str, grad: bool) -> None:
    model = TinyLM()
    compiled = model.compile(backend=backend)
    tokens, targets = _i([[0, 4, 2], [1, 3, 3]]), _i([[4, 2, 0], [3, 3, 1]])

    def call(m: Any, *args: Any) -> Any:
        if grad:
            return m(*args)
        with kiln.no_grad():
            return m(*args)

    loss = call(compiled, tokens, targets)
    np.testing.assert_allclose(loss.item(), call(model, tokens, targets).item(), rtol=1e-6)
    if grad:
        loss.backward()
        assert model.emb.weight.grad is not None
    for bad_tokens, bad_targets, match in [
        (_i([[0, 5, 2], [1, 3, 3]]), targets, r"embedding: index 5 is out of range for an embedding table of 5 rows"),
        (_i([[0, -2, 2], [1, 3, 3]]), targets, r"embedding: index -2 is out of range"),
        (tokens, _i([[4, 2, 5], [3, 3, 1]]), r"cross_entropy: target 5 is out of bounds"),
        (tokens, _i([[4, 2, 0], [-1, 3, 1]]), r"cross_entropy: target -1 is out of bounds"),
    ]:
        eager = _eager_error(lambda *a: call(model, *a), (bad_tokens, bad_targets))
        with pytest.raises(IndexError, match=match) as info:
            call(compiled, bad_tokens, bad_targets)
        assert str(info.value) == str(eager)
    again = call(compiled, tokens, targets)
    np.testing.assert_allclose(again.item(), call(model, tokens, targets).item(), rtol=1e-6)
    assert compiled.stats.misses == 1 and compiled.stats.fallbacks == 0


# ---- class targets ----------------------------------------------------------------------------
LOSSES = [
    pytest.param(lambda x, t: F.cross_entropy(x, t), "cross_entropy", id="cross_entropy"),
    pytest.param(lambda x, t: F.nll_loss(F.log_softmax(x, 1), t, reduction="sum"), "nll_loss", id="nll_loss"),
    pytest.param(lambda x, t: kiln.nn.CrossEntropyLoss(ignore_index=-1)(x, t), "cross_entropy",
                 id="CrossEntropyLoss-ignore"),
    pytest.param(lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1, reduction="none"), "cross_entropy",
                 id="smoothed-none"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("fn", "op"), LOSSES)
def test_class_targets_are_checked_on_every_replay(fn: Callable, op: str, backend: str) -> None:
    x = _x(4, 3)
    good = (x, _i([0, 2, 1, 2]))
    bad = [(x, _i([0, 3, 1, 2])), (x, _i([0, 1, -2, 2])), (x, _i([7, 0, 0, 0]))]
    _check_replays(fn, good, bad, rf"{op}: target (3|-2|7) is out of bounds: class indices must lie in \[0, 2\] "
                                  r"for an input with 3 classes", backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ignored_targets_pass_the_check(backend: str) -> None:
    def fn(x: kiln.Tensor, t: kiln.Tensor) -> kiln.Tensor:
        return F.cross_entropy(x, t, ignore_index=-1)

    x = _x(4, 3)
    _check_replays(fn, (x, _i([0, -1, 2, -1])), [(x, _i([0, -1, -2, 1]))], r"target -2 is out of bounds", backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_plans_check_too(backend: str) -> None:
    """A training entry (forward and backward plans) runs the checks in its forward plan."""
    def fn(x: kiln.Tensor, i: kiln.Tensor, t: kiln.Tensor) -> kiln.Tensor:
        return (kiln.gather(x, 1, i) ** 2).sum() + F.cross_entropy(x, t)

    x = kiln.tensor(_x(2, 3).numpy(), requires_grad=True)
    compiled = kiln.compile(fn, backend=backend)
    good = (x, _i([[2], [0]]), _i([1, 2]))
    loss = compiled(*good)
    loss.backward()
    compiled_grad = x.grad.numpy().copy()
    x.grad = None
    fn(*good).backward()
    np.testing.assert_allclose(compiled_grad, x.grad.numpy(), rtol=1e-6)
    assert compiled.cache_entries and all(e.kind == "training" for e in compiled.cache_entries)
    with pytest.raises(IndexError, match=r"gather: index -1 is out of range"):
        compiled(x, _i([[2], [-1]]), _i([1, 2]))
    with pytest.raises(IndexError, match=r"cross_entropy: target 3 is out of bounds"):
        compiled(x, _i([[2], [0]]), _i([1, 3]))
    np.testing.assert_allclose(compiled(*good).item(), fn(*good).item(), rtol=1e-6)
    assert compiled.stats.misses == 1


# ---- integer division by zero -----------------------------------------------------------------
def _ifloordiv(a: kiln.Tensor, b: kiln.Tensor) -> kiln.Tensor:
    a = a.clone()
    a //= b
    return a


DIVISIONS = [
    pytest.param(lambda a, b: a // b, "floor_divide", id="//"),
    pytest.param(lambda a, b: a % b, "remainder", id="%"),
    pytest.param(lambda a, b: 5 // b, "floor_divide", id="int//tensor"),
    pytest.param(lambda a, b: kiln.div(a, b, rounding_mode="floor") + 1, r"div\(rounding_mode='floor'\)",
                 id="div-floor"),
    pytest.param(lambda a, b: kiln.div(a, b, rounding_mode="trunc") * 2, r"div\(rounding_mode='trunc'\)",
                 id="div-trunc"),
    pytest.param(lambda a, b: a.int() % b.int(), "remainder", id="int32"),
    pytest.param(_ifloordiv, "floor_divide", id="//="),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("fn", "op"), DIVISIONS)
def test_integer_division_by_zero_is_checked_on_every_replay(fn: Callable, op: str, backend: str) -> None:
    a = _i([7, -7, 9, -9])
    _check_replays(fn, (a, _i([2, 3, -2, -4])), [(a, _i([2, 0, -2, -4])), (a, _i([0, 0, 0, 0]))],
                   rf"ZeroDivisionError: {op}: integer division by zero", backend,
                   error=kiln.IntegerDivisionByZeroError)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_division_by_zero_is_not_checked(backend: str) -> None:
    def fn(a: kiln.Tensor, b: kiln.Tensor) -> kiln.Tensor:
        return a // b + a % b

    compiled = kiln.compile(fn, backend=backend)
    a, b = _x(4), kiln.tensor([1.0, 0.0, 2.0, 0.0])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(compiled(a, b).numpy(), fn(a, b).numpy())
    assert not {n.prim.name for g in compiled.graphs() for n in g.nodes} & CHECKS


def test_a_literal_divisor_is_checked_once_at_trace_time() -> None:
    """``x // 2`` bakes the 2 in: it cannot change, so no check node is recorded for it."""
    graph = kiln.jit.trace_graph(lambda a: a // 2 + a % 3, _i([7, -7]))
    assert [n.prim.name for n in graph.nodes if n.prim.name in CHECKS] == []
    with pytest.raises(kiln.IntegerDivisionByZeroError):
        kiln.jit.trace_graph(lambda a: a // 0, _i([7, -7]))


# ---- dynamic_dims -----------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_dim_size_is_each_calls_size(backend: str) -> None:
    """The size param of the check is symbolic: a replay at N=5 accepts index 4, rejects 5, and
    the message names this call's size and shape (as eager's does)."""
    def fn(x: kiln.Tensor, i: kiln.Tensor) -> kiln.Tensor:
        return kiln.gather(x, 1, i) * 2

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the check must not specialize the plan to the traced size
        compiled = kiln.compile(fn, backend=backend, dynamic_dims={0: {1: "N"}})
        compiled(_x(2, 3), _i([[2], [0]]))
        x5 = _x(2, 5)
        np.testing.assert_array_equal(compiled(x5, _i([[4], [3]])).numpy(), fn(x5, _i([[4], [3]])).numpy())
        for bad in (5, -1):
            eager = _eager_error(fn, (x5, _i([[0], [bad]])))
            with pytest.raises(IndexError, match=rf"index {bad} is out of range for dimension 1 with size 5 "
                                                 r"\(input shape \(2, 5\)\); valid indices: 0 to 4") as info:
                compiled(x5, _i([[0], [bad]]))
            assert str(info.value) == str(eager)
        x3 = _x(2, 3)
        with pytest.raises(IndexError, match=r"index 4 is out of range for dimension 1 with size 3"):
            compiled(x3, _i([[4], [0]]))
    assert compiled.stats.misses == 1
    (graph,) = compiled.graphs()
    (check,) = [n for n in graph.nodes if n.prim.name == "check_index"]
    assert "N" in str(check.params["shape"][1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_classes_and_batch(backend: str) -> None:
    def fn(x: kiln.Tensor, t: kiln.Tensor) -> kiln.Tensor:
        return F.cross_entropy(x, t)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = kiln.compile(fn, backend=backend, dynamic_dims={0: {0: "B", 1: "C"}, 1: {0: "B"}})
        compiled(_x(3, 4), _i([0, 1, 3]))
        x = _x(5, 6)
        np.testing.assert_allclose(compiled(x, _i([0, 5, 3, 2, 1])).item(), fn(x, _i([0, 5, 3, 2, 1])).item(),
                                   rtol=1e-6)
        with pytest.raises(IndexError, match=r"target 6 is out of bounds: class indices must lie in \[0, 5\] "
                                             r"for an input with 6 classes"):
            compiled(x, _i([0, 1, 6, 2, 1]))
    assert compiled.stats.misses == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_with_dynamic_batch(backend: str) -> None:
    emb = kiln.nn.Embedding(4, 3)
    compiled = kiln.compile(emb, backend=backend, dynamic_dims={0: {0: "B"}})
    with kiln.no_grad():
        compiled(_i([[0, 1], [2, 3]]))
        np.testing.assert_array_equal(compiled(_i([[3, 1], [2, 0], [1, 1]])).numpy(),
                                      emb(_i([[3, 1], [2, 0], [1, 1]])).numpy())
        with pytest.raises(IndexError, match=r"embedding: index 4 is out of range for an embedding table of 4 rows"):
            compiled(_i([[3, 1], [2, 4], [1, 1]]))
    assert compiled.stats.misses == 1


# ---- the graph and its passes -----------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_check_whose_result_goes_unused_still_runs(backend: str) -> None:
    """Eager raises even when the gathered values are never used: dead-code elimination keeps checks."""
    def fn(x: kiln.Tensor, i: kiln.Tensor, a: kiln.Tensor, b: kiln.Tensor) -> kiln.Tensor:
        kiln.gather(x, 1, i)
        _ = a // b
        return x * 2

    compiled = kiln.compile(fn, backend=backend)
    x = _x(2, 3)
    compiled(x, _i([[0], [1]]), _i([1]), _i([1]))
    with pytest.raises(IndexError, match="gather: index 3"):
        compiled(x, _i([[0], [3]]), _i([1]), _i([1]))
    with pytest.raises(kiln.IntegerDivisionByZeroError):
        compiled(x, _i([[0], [1]]), _i([1]), _i([0]))
    (graph,) = compiled.graphs()
    assert [n.prim.name for n in graph.nodes if n.prim.name in CHECKS] == ["check_index", "check_divisor"]
    assert "gather" not in [n.prim.name for n in graph.nodes]  # the unused gather itself is dropped


def test_cse_merges_equal_checks_and_keeps_different_ones() -> None:
    def fn(x: kiln.Tensor, i: kiln.Tensor) -> kiln.Tensor:
        return kiln.gather(x, 1, i) + kiln.gather(x * 2, 1, i) + kiln.take_along_dim(x, i, 1)

    compiled = kiln.compile(fn, backend="interpret")
    compiled(_x(2, 3), _i([[0], [1]]))
    (graph,) = compiled.graphs()
    checks = [n for n in graph.nodes if n.prim.name == "check_index"]
    assert sorted(n.params["op"] for n in checks) == ["gather", "take_along_dim"]


def test_eager_checks_return_the_tensor_itself() -> None:
    """Eager runs the check kernel directly: no new tensor, no graph, nothing recorded."""
    from kiln.functional.checks import checked_divisor, checked_index, checked_targets

    assert trace_state.tracer is None
    x, i = _x(2, 3), _i([[0], [2]])
    assert checked_index("gather", i, x, 1) is i
    t = i.reshape(-1)
    assert checked_targets("nll_loss", t, 3, -100) is t
    d = i + 1
    assert checked_divisor("floor_divide", i, d) is d
    with pytest.raises(IndexError, match="gather: index 2 is out of range for dimension 1 with size 2"):
        checked_index("gather", i, _x(2, 2), 1)


def test_check_primitives_are_identities_without_gradient() -> None:
    for name in CHECKS:
        prim = REGISTRY[name]
        assert prim.is_check and prim.is_view
        assert prim.vjp(None, (None,), None) == (None,)


def test_onnx_export_skips_the_checks() -> None:
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    model = TinyLM().eval()
    tokens, targets = _i([[0, 4, 2], [1, 3, 3]]), _i([[4, 2, 0], [3, 3, 1]])
    proto = kiln.onnx.export(model, (tokens, targets), None, dynamic_dims={0: {0: "B"}, 1: {0: "B"}})
    assert not any(re.search("check", n.name + n.op_type) for n in proto.graph.node)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    t3, y3 = _i([[0, 4, 2], [1, 3, 3], [2, 2, 2]]), _i([[4, 2, 0], [3, 3, 1], [0, 1, 2]])
    (got,) = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), (t3, y3))})
    with kiln.no_grad():
        np.testing.assert_allclose(got, model(t3, y3).numpy(), rtol=1e-5)


def test_a_check_on_a_literal_is_not_constant_folded():
    """Checks (and collectives) are effects: constant folding leaves them in the plan."""
    import dataclasses

    from kiln.jit.passes.constant_fold import ConstantFold

    w = kiln.randn(5, 3)

    def f(x):
        return x + kiln.nn.functional.embedding(kiln.tensor([1, 2]), w)

    graph = kiln.jit.trace_graph(f, kiln.randn(2, 3))
    index = graph.nodes[0].inputs[0]  # the check's input: make it a baked literal
    k = graph.inputs.index(index)
    graph.specs[k] = dataclasses.replace(graph.specs[k], literal=np.array([1, 2]))
    folded = ConstantFold()(graph).to_text()
    assert "check_index" in folded
