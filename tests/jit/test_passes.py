"""Each graph pass on a small graph, before and after: node ops, counts, and replayed numbers.

Graphs come from tracing small kiln functions (`trace_graph`) or are built by hand
when the frontend never emits the pattern (no-op reshape/cast, stop_gradient
before NoGradStrip, two random draws on one key). Every rewritten graph is
replayed through the reference interpreter and compared with eager.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.jit.api import trace_graph
from kiln.jit.backends.interpret import Plan
from kiln.jit.ir import Graph, InputSpec, Node, StateWrite, Value
from kiln.jit.passes import (CSE, ArithmeticElimination, ConstantFold, DeadNodeElim, GenericCompiler, Looped,
                             NoGradStrip, Pat, PassLog, Pipeline, RewritePass, Rule, SubRewrite, Timed,
                             logging_passes, run_pass)
from kiln.ops.primitive import REGISTRY, AbstractValue

# ---- helpers ------------------------------------------------------------------------


def ops(graph: Graph) -> list[str]:
    return [n.prim.name for n in graph.nodes]


def replay(graph: Graph, *arrays: np.ndarray) -> list[np.ndarray]:
    """Run `graph` on the interpreter: arg inputs from `arrays`, literals from their specs."""
    inputs = []
    for spec in graph.specs:
        if spec.kind == "arg":
            inputs.append(arrays[spec.ref])
        elif spec.kind == "literal":
            inputs.append(spec.literal)
        else:
            raise AssertionError(f"unexpected input kind {spec.kind}")
    outs, _ = Plan(graph).run(inputs)
    return outs


def eager(fn, *arrays: np.ndarray) -> np.ndarray:
    with kiln.no_grad():
        return fn(*[kiln.tensor(a) for a in arrays]).numpy()


def traced(fn, *arrays: np.ndarray) -> Graph:
    return trace_graph(fn, *[kiln.tensor(a) for a in arrays])


def check_same(graph: Graph, fn, *arrays: np.ndarray) -> None:
    """The graph replays to exactly eager's numbers (nan and inf included)."""
    np.testing.assert_array_equal(replay(graph, *arrays)[0], eager(fn, *arrays))


class Hand:
    """Builds a graph by hand, for patterns the frontend never emits."""

    def __init__(self) -> None:
        self.graph = Graph()

    def arg(self, shape: tuple, dtype=kiln.float32) -> Value:
        v = Value(shape, dtype)
        self.graph.inputs.append(v)
        self.graph.specs.append(InputSpec("arg", sum(s.kind == "arg" for s in self.graph.specs)))
        return v

    def literal(self, value, dtype=kiln.float32) -> Value:
        array = np.asarray(value, dtype=dtype.np)
        v = Value(array.shape, dtype)
        self.graph.inputs.append(v)
        self.graph.specs.append(InputSpec("literal", None, literal=array))
        return v

    def op(self, name: str, *inputs: Value, **params) -> Value:
        prim = REGISTRY[name]
        aval = prim.abstract(*[AbstractValue(v.shape, v.dtype) for v in inputs], **params)
        out = Value(aval.shape, aval.dtype)
        self.graph.nodes.append(Node(prim, list(inputs), params, out))
        return out

    def done(self, *outputs: Value) -> Graph:
        self.graph.outputs = list(outputs)
        return self.graph


# the NaN-safety cases compute inf - inf, 0 / 0, log(-1) on purpose
nan_ops = pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning", "ignore:divide by zero:RuntimeWarning")

X = np.array([[1.5, -2.0, 0.0], [3.0, 0.25, -7.0]], dtype=np.float32)
SPECIAL = np.array([[np.inf, -np.inf, np.nan], [0.0, -1.0, 2.0]], dtype=np.float32)


# ---- DeadNodeElim -----------------------------------------------------------------------


def test_dead_node_elim_removes_unused_nodes():
    h = Hand()
    a = h.arg((2, 3))
    two = h.literal(2.0)
    used = h.op("mul", a, two)
    dead = h.op("exp", a)
    h.op("neg", dead)  # dead chain: exp -> neg
    g = h.done(used)
    assert ops(g) == ["mul", "exp", "neg"]
    out = DeadNodeElim()(g)
    assert ops(out) == ["mul"]
    assert ops(g) == ["mul", "exp", "neg"]  # the input graph is not edited
    np.testing.assert_array_equal(replay(out, X)[0], X * 2)


def test_dead_node_elim_keeps_state_write_producers():
    h = Hand()
    a = h.arg((2, 3))
    out_value = h.op("exp", a)
    update = h.op("mul", a, h.literal(0.5))  # only reaches a state write
    g = h.done(out_value)
    g.state_writes.append(StateWrite("arg", 0, update))
    result = DeadNodeElim()(g)
    assert ops(result) == ["exp", "mul"]
    outs, writes = Plan(result).run([X, np.float32(0.5)])
    np.testing.assert_array_equal(writes[0], X * 0.5)


def test_dead_node_elim_on_a_traced_graph_and_unchanged_graph_is_returned_as_is():
    def f(x):
        unused = (x * 3).exp()  # noqa: F841 - dead on purpose
        return x + 1

    g = traced(f, X)  # trace_graph already runs DeadNodeElim
    assert ops(g) == ["add"]
    assert DeadNodeElim()(g) is g
    check_same(g, f, X)


# ---- CSE --------------------------------------------------------------------------------


def test_cse_merges_duplicate_nodes():
    def f(x):
        return (x * 2).exp() + (x * 2).exp()

    g = traced(f, X)
    assert ops(g) == ["mul", "exp", "mul", "exp", "add"]
    out = CSE()(g)
    assert ops(out) == ["mul", "exp", "add"]
    add = out.nodes[-1]
    assert add.inputs[0] is add.inputs[1]
    check_same(out, f, X)


def test_cse_keeps_nodes_that_differ_in_params_or_literal_value():
    def f(x):
        return x.sum(axis=0) * 2 + x.sum(axis=0) * 3 + x.sum(axis=1).sum()

    g = traced(f, X)
    out = CSE()(g)
    assert ops(out).count("sum") == 3  # sum(axis=0) merged; sum(axis=1) and the total stay
    assert ops(out).count("mul") == 2  # *2 and *3 differ
    check_same(out, f, X)


def test_cse_never_merges_random_nodes():
    h = Hand()
    key = Value((2,), kiln.int64)
    h.graph.inputs.append(key)
    h.graph.specs.append(InputSpec("arg", 0))
    u1 = h.op("uniform", key, shape=(3,), dtype="float32")
    u2 = h.op("uniform", key, shape=(3,), dtype="float32")
    n1 = h.op("normal", key, shape=(3,), dtype="float32")
    n2 = h.op("normal", key, shape=(3,), dtype="float32")
    s = h.op("add", h.op("add", u1, u2), h.op("add", n1, n2))
    g = h.done(s)
    out = CSE()(g)
    assert ops(out).count("uniform") == 2
    assert ops(out).count("normal") == 2


def test_cse_on_traced_random_ops_keeps_both_draws():
    def f(x):
        return x + kiln.rand(2, 3) + kiln.rand(2, 3)

    g = trace_graph(f, kiln.tensor(X))
    assert ops(CSE()(g)).count("uniform") == 2


def test_cse_does_not_merge_two_outputs_into_one_buffer():
    g = traced(lambda x: (x * 2, x * 2, (x * 2).exp()), X)
    out = CSE()(g)
    assert ops(out) == ["mul", "mul", "exp"]  # the exp's mul is merged; the two outputs are not
    assert out.outputs[0] is not out.outputs[1]


def test_cse_unchanged_graph_is_returned_as_is():
    g = traced(lambda x: x * 2 + 1, X)
    assert CSE()(g) is g


# ---- ConstantFold ----------------------------------------------------------------------


def test_constant_fold_folds_literal_only_subexpressions():
    def f(x):
        return x * (kiln.full((2, 3), 2.0) * 0.5 + 1.0)

    g = traced(f, X)
    assert ops(g) == ["full", "mul", "add", "mul"]
    out = ConstantFold()(g)
    assert ops(out) == ["mul"]
    folded = out.nodes[0].inputs[1]
    spec = out.specs[[v.id for v in out.inputs].index(folded.id)]
    assert spec.kind == "literal"
    np.testing.assert_array_equal(spec.literal, np.full((2, 3), 2.0, np.float32))
    assert spec.literal.dtype == np.float32
    check_same(out, f, X)


def test_constant_fold_leaves_nodes_with_runtime_inputs():
    g = traced(lambda x: (x * 2).exp() + 1, X)
    assert ConstantFold()(g) is g


def test_constant_fold_never_folds_random_nodes():
    h = Hand()
    key = h.literal(np.array([7, 0]), dtype=kiln.int64)
    u = h.op("uniform", key, shape=(3,), dtype="float32")
    g = h.done(h.op("mul", u, h.literal(2.0)))
    assert ops(ConstantFold()(g)) == ["uniform", "mul"]


def test_constant_fold_keeps_outputs_as_nodes_so_each_call_gets_a_fresh_array():
    h = Hand()
    a = h.arg((3,))
    zeros = h.op("full", shape=(3,), value=0.0, dtype="float32", device=kiln.device("cpu"))
    g = h.done(h.op("exp", a), zeros)
    out = ConstantFold()(g)
    assert ops(out) == ["full", "exp"]
    plan = Plan(out)
    first = plan.run([X[0]])[0][1]
    first += 1  # the user mutates the returned tensor
    np.testing.assert_array_equal(plan.run([X[0]])[0][1], np.zeros(3))


def test_compiled_constant_output_is_not_shared_between_calls():
    f = kiln.compile(lambda x: (x + 1, kiln.zeros(3)))
    x = kiln.tensor(X[0])
    with kiln.no_grad():
        f(x)
        f(x)[1].add_(5.0)
        np.testing.assert_array_equal(f(x)[1].numpy(), np.zeros(3))
    assert f.stats.hits == 2


# ---- ArithmeticElimination ------------------------------------------------------------


@pytest.mark.parametrize("fn, before", [
    (lambda x: (x + 0).exp(), ["add", "exp"]),
    (lambda x: (0 + x).exp(), ["add", "exp"]),
    (lambda x: (x * 1).exp(), ["mul", "exp"]),
    (lambda x: (1 * x).exp(), ["mul", "exp"]),
    (lambda x: (x / 1).exp(), ["div", "exp"]),
    (lambda x: (x - 0).exp(), ["sub", "exp"]),
    (lambda x: (x ** 1).exp(), ["pow", "exp"]),
    (lambda x: (-(-x)).exp(), ["neg", "neg", "exp"]),
])
@nan_ops
def test_arith_elim_removes_identities(fn, before):
    for data in (X, SPECIAL):
        g = traced(fn, data)
        assert ops(g) == before
        out = DeadNodeElim()(ArithmeticElimination()(g))
        assert ops(out) == ["exp"]
        assert out.nodes[0].inputs[0] is out.inputs[0]
        check_same(out, fn, data)


def test_arith_elim_removes_noop_reshape_cast_permute_expand():
    h = Hand()
    a = h.arg((2, 3))
    b = h.op("reshape", a, shape=(2, 3))
    c = h.op("cast", b, dtype="float32")
    d = h.op("permute", c, perm=(0, 1))
    e = h.op("expand", d, shape=(2, 3))
    g = h.done(h.op("exp", e))
    out = DeadNodeElim()(ArithmeticElimination()(g))
    assert ops(out) == ["exp"]
    np.testing.assert_array_equal(replay(out, X)[0], np.exp(X))


def test_arith_elim_keeps_real_reshape_cast_and_permute():
    h = Hand()
    a = h.arg((2, 3))
    b = h.op("reshape", a, shape=(3, 2))
    c = h.op("cast", b, dtype="float64")
    g = h.done(h.op("permute", c, perm=(1, 0)))
    out = ArithmeticElimination()(g)
    assert out is g
    np.testing.assert_array_equal(replay(out, X)[0], X.reshape(3, 2).astype(np.float64).T)


def test_arith_elim_never_changes_a_values_shape():
    # x * 1 with a (2, 1) literal broadcasts x from (3,) to (2, 3): it must stay
    h = Hand()
    a = h.arg((3,))
    g = h.done(h.op("exp", h.op("mul", a, h.literal(np.ones((2, 1))))))
    out = ArithmeticElimination()(g)
    assert ops(out) == ["mul", "exp"]
    assert replay(out, X[0])[0].shape == (2, 3)


@pytest.mark.parametrize("fn, expected_ops", [
    (lambda x: x * 0, ["mul"]),         # inf * 0 is nan, not 0
    (lambda x: 0 * x, ["mul"]),
    (lambda x: x - x, ["sub"]),         # inf - inf is nan, not 0
    (lambda x: x.log().exp(), ["log", "exp"]),  # log(-1) is nan, not -1
    (lambda x: x / x, ["div"]),         # 0 / 0 and inf / inf are nan, not 1
    (lambda x: x + -0.0 * x, ["mul", "add"]),
])
@nan_ops
def test_arith_elim_is_nan_safe(fn, expected_ops):
    g = traced(fn, SPECIAL)
    out = DeadNodeElim()(ArithmeticElimination()(g))
    assert ops(out) == expected_ops
    result = replay(out, SPECIAL)[0]
    np.testing.assert_array_equal(result, eager(fn, SPECIAL))
    assert np.isnan(result).any()  # the cases really produce nan, so a rewrite would be visible


@nan_ops
def test_generic_compiler_is_nan_safe_too():
    def f(x):
        return x * 0 + (x - x) + x.log().exp() + x / x

    g = traced(f, SPECIAL)
    out = GenericCompiler()(g)
    check_same(out, f, SPECIAL)


def test_arith_elim_does_not_return_an_input_as_a_fresh_output():
    g = traced(lambda x: x + 0, X)
    assert ops(ArithmeticElimination()(g)) == ["add"]  # the output must not be x's own memory
    f = kiln.compile(lambda x: x * 1)
    x = kiln.tensor(X)
    with kiln.no_grad():
        f(x)
        y = f(x)
        y.add_(100.0)
    np.testing.assert_array_equal(x.numpy(), X)


# ---- NoGradStrip -----------------------------------------------------------------------


def _raw_trace(fn, *arrays):
    """Trace without any pass, so stop_gradient nodes are still there."""
    from kiln.jit.trace import Tracer

    tracer = Tracer()
    tensors = [kiln.tensor(a) for a in arrays]
    for i, t in enumerate(tensors):
        tracer.add_input(t, InputSpec("arg", i))
    with tracer, kiln.no_grad():
        out = fn(*tensors)
    tracer.set_outputs([out])
    return tracer.graph


def test_nograd_strip_removes_stop_gradient():
    def f(x):
        return x.detach().exp() * x.detach().detach()

    g = _raw_trace(f, X)
    assert ops(g).count("stop_gradient") == 3
    g.requires_grad = {g.inputs[0].id}
    out = NoGradStrip()(g)
    assert "stop_gradient" not in ops(out)
    assert ops(out) == ["exp", "mul"]
    assert out.requires_grad == set()
    assert ops(g).count("stop_gradient") == 3  # the input graph is not edited
    check_same(out, f, X)


def test_nograd_strip_rewires_outputs_and_state_writes():
    h = Hand()
    a = h.arg((2, 3))
    sg = h.op("stop_gradient", a)
    g = h.done(h.op("exp", sg), sg)
    g.state_writes.append(StateWrite("arg", 0, sg))
    out = NoGradStrip()(g)
    assert ops(out) == ["exp"]
    assert out.outputs[1] is a and out.state_writes[0].value is a


# ---- SubRewrite and the rule engine -----------------------------------------------------


@pytest.mark.parametrize("fn", [
    lambda a, b: a + b * -1,
    lambda a, b: a + -1 * b,
    lambda a, b: (b * -1) + a,
    lambda a, b: (-1 * b) + a,
])
@nan_ops
def test_sub_rewrite(fn):
    Y = np.array([[0.5, 2.0, np.inf], [-3.0, 1.0, 4.0]], dtype=np.float32)
    g = traced(fn, X, Y)
    assert ops(g) == ["mul", "add"]
    rewrite = SubRewrite()
    out = DeadNodeElim()(rewrite(g))
    assert ops(out) == ["sub"]
    a, b = out.inputs[0], out.inputs[1]
    assert out.nodes[0].inputs == [a, b]  # a - b, in that order
    assert rewrite.fired == {"add(a, mul(b, -1)) -> sub(a, b)": 1}
    check_same(out, fn, X, Y)


def test_sub_rewrite_needs_exactly_minus_one():
    g = traced(lambda a, b: a + b * -2, X, X)
    assert SubRewrite()(g) is g
    g = traced(lambda a, b: a * (b * -1), X, X)
    assert SubRewrite()(g) is g


def test_sub_rewrite_keeps_the_mul_when_it_has_other_users():
    def f(a, b):
        nb = b * -1
        return a + nb, nb.exp()

    g = traced(f, X, X)
    out = DeadNodeElim()(SubRewrite()(g))
    assert sorted(ops(out)) == ["exp", "mul", "sub"]


def test_user_rule_with_the_pattern_engine():
    # exp(x) * exp(y) -> exp(x + y), a rule a user could write
    rule = Rule(Pat("mul", Pat("exp", Pat.any("x")), Pat("exp", Pat.any("y"))),
                lambda m, b: b.emit("exp", b.emit("add", m["x"], m["y"])), name="exp-product")
    fn = lambda a, b: a.exp() * b.exp()  # noqa: E731
    g = traced(fn, X, X * 0.5)
    out = DeadNodeElim()(RewritePass([rule], name="ExpProduct")(g))
    assert ops(out) == ["add", "exp"]
    np.testing.assert_allclose(replay(out, X, X * 0.5)[0], eager(fn, X, X * 0.5), rtol=1e-6)


def test_pattern_repeated_capture_must_be_the_same_value():
    rule = Rule(Pat("mul", Pat.any("x"), Pat.any("x")), lambda m, b: b.emit("pow", m["x"], m["x"]),
                name="square")
    assert RewritePass([rule])(traced(lambda a, b: a * b, X, X)).nodes[0].prim.name == "mul"
    g = traced(lambda a: (a * a).exp(), X)
    assert "pow" in ops(RewritePass([rule])(g))


# ---- combinators: Looped, Timed, lists, GenericCompiler ----------------------------------


class CountingPass:
    name = "Counting"

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, graph: Graph) -> Graph:
        self.calls += 1
        return graph


def test_looped_reaches_a_fixpoint():
    # neg^6: each ArithmeticElimination + DCE round removes at least a pair
    def f(x):
        for _ in range(6):
            x = -x
        return x.exp()

    g = traced(f, X)
    assert ops(g) == ["neg"] * 6 + ["exp"]
    counter = CountingPass()
    looped = Looped([ArithmeticElimination(), DeadNodeElim(), counter])
    out = looped(g)
    assert ops(out) == ["exp"]
    assert 2 <= counter.calls < looped.max_iters  # stopped when nothing changed
    again = CountingPass()
    assert ops(Looped([ArithmeticElimination(), DeadNodeElim(), again])(out)) == ["exp"]
    assert again.calls == 1
    check_same(out, f, X)


def test_looped_stops_at_max_iters():
    class Grow:
        name = "Grow"

        def __call__(self, graph):
            out = graph.copy()
            v = out.outputs[0]
            n = Value(v.shape, v.dtype)
            out.nodes.append(Node(REGISTRY["exp"], [v], {}, n))
            out.outputs = [n]
            return out

    out = Looped(Grow(), max_iters=3)(traced(lambda x: x + 1, X))
    assert ops(out) == ["add", "exp", "exp", "exp"]


def test_timed_records_time():
    timed = Timed(CSE())
    assert timed.name == "Timed(CSE)"
    g = traced(lambda x: (x * 2) + (x * 2), X)
    out = timed(g)
    assert ops(out) == ["mul", "add"]
    assert timed.last_ms > 0 and timed.total_ms == timed.last_ms
    timed(out)
    assert timed.total_ms >= timed.last_ms


def test_a_list_of_passes_is_a_pipeline():
    def f(x):
        return (x * 1 + 0).exp() + (x * 1).exp()

    g = traced(f, X)
    out = run_pass([ArithmeticElimination(), CSE(), DeadNodeElim()], g)
    assert ops(out) == ["exp", "add"]
    pipe = Pipeline([ArithmeticElimination(), CSE(), DeadNodeElim()])
    assert ops(pipe(g)) == ["exp", "add"]
    assert pipe.name == "Pipeline[ArithmeticElimination, CSE, DeadNodeElim]"
    check_same(out, f, X)


def test_run_pass_rejects_non_passes():
    g = traced(lambda x: x + 1, X)
    with pytest.raises(TypeError, match="callable"):
        run_pass(42, g)
    with pytest.raises(TypeError, match="returned NoneType, expected a Graph"):
        run_pass(lambda graph: None, g)


def test_pass_log_records_node_counts_and_fired_rules():
    g = traced(lambda a, b: (a + b * -1).exp(), X, X)
    log = PassLog()
    with logging_passes(log):
        run_pass(Pipeline([SubRewrite(), DeadNodeElim()]), g)
    assert [(r.name, r.nodes_before, r.nodes_after) for r in log.records] == [
        ("SubRewrite", 3, 4), ("DeadNodeElim", 4, 2)]
    text = str(log)
    assert "add(a, mul(b, -1)) -> sub(a, b) x1" in text
    assert "DeadNodeElim" in text


def test_generic_compiler():
    def f(x, y):
        c = kiln.full((2, 3), 3.0) * 2.0       # folded
        u = (x * 1 + 0) * c                    # identities removed
        v = (x * 1 + 0) * c                    # duplicate merged
        return u + v * -1 + (y + y * -1)       # sub rewrites

    Y = X[::-1].copy()
    g = traced(f, X, Y)
    out = GenericCompiler()(g)
    assert GenericCompiler().name == "GenericCompiler"
    assert ops(out) == ["mul", "sub", "sub", "add"]
    check_same(out, f, X, Y)


# ---- user passes through kiln.compile ---------------------------------------------------


class SubToAdd:
    """A user pass: rewrites every sub(a, b) into add(a, neg(b)), counting its calls."""

    name = "SubToAdd"

    def __init__(self) -> None:
        self.calls = 0
        self.rewrote = 0

    def __call__(self, graph: Graph) -> Graph:
        self.calls += 1
        out = graph.copy()
        nodes = []
        for node in out.nodes:
            if node.prim.name == "sub":
                a, b = node.inputs
                neg = Node(REGISTRY["neg"], [b], {}, Value(b.shape, b.dtype))
                nodes.append(neg)
                node.prim, node.inputs = REGISTRY["add"], [a, neg.out]
                self.rewrote += 1
            nodes.append(node)
        out.nodes = nodes
        return out


def test_user_pass_via_compile_runs_and_shows_in_explain():
    user = SubToAdd()
    f = kiln.compile(lambda x, y: (x - y).exp(), passes=[user])
    x, y = kiln.tensor(X), kiln.tensor(X[::-1].copy())
    with kiln.no_grad():
        first = f(x, y)
        second = f(x, y)
    assert user.calls >= 1 and user.rewrote >= 1
    graph = f.graphs()[0]
    assert "sub" not in ops(graph) and "neg" in ops(graph)
    expected = np.exp(X - X[::-1])
    np.testing.assert_allclose(first.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(second.numpy(), expected, rtol=1e-6)
    text = f.explain()
    assert "SubToAdd" in text


def test_user_pass_in_training_mode_keeps_gradients_right():
    user = CountingPass()
    w = kiln.tensor(X, requires_grad=True)
    f = kiln.compile(lambda x: (x * w).sum(), passes=[user])
    x = kiln.tensor(X[::-1].copy())
    f(x).backward()
    f(x).backward()
    assert user.calls >= 2  # forward and backward graphs
    np.testing.assert_allclose(w.grad.numpy(), 2 * X[::-1], rtol=1e-6)
    assert "Counting" in f.explain()


def test_compile_rejects_a_non_callable_pass():
    with pytest.raises(TypeError, match="passes"):
        kiln.compile(lambda x: x, passes=[42])


def test_pass_logs_are_per_thread():
    import threading

    graphs = {name: traced(fn, X) for name, fn in
              (("a", lambda x: (x * 2) + (x * 2)), ("b", lambda x: (x + 0).exp()))}
    logs: dict[str, PassLog] = {}
    barrier = threading.Barrier(2)

    def work(name: str, passes) -> None:
        log = PassLog()
        with logging_passes(log):
            barrier.wait()
            for _ in range(50):
                run_pass(passes, graphs[name])
        logs[name] = log

    threads = [threading.Thread(target=work, args=("a", CSE())),
               threading.Thread(target=work, args=("b", ArithmeticElimination()))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert {r.name for r in logs["a"].records} == {"CSE"} and len(logs["a"].records) == 50
    assert {r.name for r in logs["b"].records} == {"ArithmeticElimination"} and len(logs["b"].records) == 50
