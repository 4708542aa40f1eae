"""Graph.verify, the value-renaming helpers, literal elision in xpr, and per-pass graphs.

The test suite runs with verification on (tests/conftest.py calls debug.set_verify(True)),
so every graph a pass returns anywhere in the suite is checked. These tests check that
the checker catches what it should, and names what it should.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.jit import debug
from kiln.jit.api import trace_graph
from kiln.jit.ir import Graph, GraphVerificationError, InputSpec, Node, StateWrite, Value, same_shape
from kiln.jit.passes import (CSE, ConstantFold, DeadNodeElim, FunctionPass, GenericCompiler, PassLog,
                             Pipeline, logging_passes, run_pass)
from kiln.jit.symbolic import Expr, SymInt
from kiln.ops.primitive import REGISTRY


def mlp_layer(a, w, b):
    return kiln.relu(a @ w + b)


def _traced():
    """{ lambda a:f32[2,3] b:f32[3,4] c:f32[4] ; let d = matmul a b; e = add d c; f = relu e in (f) }"""
    return trace_graph(mlp_layer, kiln.randn(2, 3), kiln.randn(3, 4), kiln.randn(4))


def _chain():
    """a -> exp -> b -> neg -> c, built by hand."""
    a = Value((3,), kiln.float32)
    b = Value((3,), kiln.float32)
    c = Value((3,), kiln.float32)
    g = Graph([a], [InputSpec("arg", 0)], [Node(REGISTRY["exp"], [a], {}, b), Node(REGISTRY["neg"], [b], {}, c)],
              [c])
    return g, a, b, c


# ---- what verify catches ----------------------------------------------------------------


def test_a_well_formed_graph_verifies():
    _traced().verify()
    _chain()[0].verify()


def test_a_node_using_a_value_defined_later():
    g, a, b, c = _chain()
    g.nodes.reverse()  # neg b now comes before exp defines b
    with pytest.raises(GraphVerificationError) as err:
        g.verify(after="MyReorder")
    message = str(err.value)
    assert "after pass MyReorder" in message
    # names follow the broken graph's own order: the neg node now defines b and reads c
    assert "operand 0 uses c before its definition" in message
    assert "at node 0: b:f32[3] = neg c" in message  # the node, as its xpr line
    assert "found:    c defined later, by node 1: c:f32[3] = exp a" in message
    assert err.value.node_index == 0 and err.value.pass_name == "MyReorder"
    assert err.value.node_text == "b:f32[3] = neg c"


def test_an_undefined_value():
    g, a, b, c = _chain()
    stray = Value((3,), kiln.float32)
    g.nodes[1].inputs = [stray]
    with pytest.raises(GraphVerificationError) as err:
        g.verify()
    message = str(err.value)
    assert "which no input, literal or node defines" in message
    assert "at node 1: c:f32[3] = neg" in message
    assert "expected:" in message and "found:    no definition of" in message
    assert message.startswith("invalid graph: ")  # no pass named when none is known


def test_an_output_nothing_defines():
    g, a, b, c = _chain()
    g.outputs = [c, Value((2,), kiln.float32)]
    with pytest.raises(GraphVerificationError, match=r"output 1 uses \w+:f32\[2\], which no input"):
        g.verify()


def test_a_state_write_of_an_undefined_value():
    g, a, b, c = _chain()
    g.state_writes = [StateWrite("arg", 0, Value((3,), kiln.float32))]
    with pytest.raises(GraphVerificationError, match=r"state write 0 \(arg\[0\]\) uses"):
        g.verify()


def test_a_wrong_shape_on_a_node():
    g = _traced()
    add = next(n for n in g.nodes if n.prim.name == "add")
    add.out.shape = (2, 5)  # a pass that got broadcasting wrong
    with pytest.raises(GraphVerificationError) as err:
        g.verify(after="BadBroadcast")
    message = str(err.value)
    assert "after pass BadBroadcast" in message
    assert "the shape of e disagrees with add's abstract rule" in message
    assert "at node 1: e:f32[2,5] = add d c" in message
    assert "expected: f32[2,4] (add of f32[2,4], f32[4])" in message
    assert "found:    f32[2,5]" in message
    assert (err.value.expected, err.value.found) == ("f32[2,4] (add of f32[2,4], f32[4])", "f32[2,5]")


def test_a_wrong_dtype_on_a_node():
    g, a, b, c = _chain()
    c.dtype = kiln.float64
    with pytest.raises(GraphVerificationError) as err:
        g.verify()
    message = str(err.value)
    assert "the dtype of c disagrees with neg's abstract rule" in message
    assert "expected: f32[3] (neg of f32[3])" in message and "found:    f64[3]" in message


def test_operands_the_abstract_rule_rejects():
    g = _traced()
    matmul = g.nodes[0]
    matmul.inputs = [matmul.inputs[0], matmul.inputs[0]]  # f32[2,3] @ f32[2,3]
    with pytest.raises(GraphVerificationError, match="matmul's abstract rule rejects the operands") as err:
        g.verify()
    assert "f32[2,3], f32[2,3]" in err.value.found


def test_a_value_defined_twice():
    g, a, b, c = _chain()
    g.nodes.append(Node(REGISTRY["neg"], [b], {}, c))
    with pytest.raises(GraphVerificationError, match="c is defined twice"):
        g.verify()


def test_inputs_and_specs_must_pair_up():
    g, a, b, c = _chain()
    g.specs.append(InputSpec("arg", 1))
    with pytest.raises(GraphVerificationError, match="inputs and their specs differ in number"):
        g.verify()


def test_symbolic_dims_compare_by_their_expression():
    b = Expr.sym("B")
    assert same_shape((SymInt(4, b), 3), (SymInt(4, Expr.sym("B")), 3))
    assert same_shape((SymInt(8, Expr("*", 2, b)),), (SymInt(8, Expr("*", 2, b)),))
    assert not same_shape((SymInt(4, b),), (4,))  # the traced size is not the symbol
    assert not same_shape((SymInt(4, b),), (SymInt(4, Expr.sym("T")),))
    assert not same_shape((2, 3), (2, 3, 1))


def test_a_wrong_symbolic_shape_is_caught():
    fast = kiln.compile(lambda x: (x * 2.0).exp(), dynamic_dims={0: {0: "B"}})
    with kiln.no_grad():
        fast(kiln.randn(4, 3))
    (graph,) = fast.graphs()
    graph.verify()
    broken = graph.copy()
    broken.nodes[-1].out = Value((4, 3), kiln.float32)  # the traced size where B belongs
    broken.outputs = [broken.nodes[-1].out]
    with pytest.raises(GraphVerificationError) as err:
        broken.verify()
    assert err.value.expected.startswith("f32[B,3]") and err.value.found == "f32[4,3]"


# ---- verify runs after every pass ---------------------------------------------------------


def _reorder(graph):
    out = graph.copy()
    out.nodes.reverse()
    return out


def test_run_pass_names_the_pass_that_broke_the_graph():
    assert debug.verify_enabled()  # tests/conftest.py turns it on for the whole suite
    with pytest.raises(GraphVerificationError, match="after pass Reorder") as err:
        run_pass([DeadNodeElim(), FunctionPass(_reorder, name="Reorder"), CSE()], _traced())
    assert err.value.pass_name == "Reorder"


def test_a_graph_broken_before_the_passes_is_reported_as_such():
    g, a, b, c = _chain()
    g.nodes.reverse()
    with pytest.raises(GraphVerificationError, match=r"the graph given to pass DeadNodeElim, before any pass ran"):
        run_pass(DeadNodeElim(), g)


def test_a_broken_user_pass_fails_the_compile(monkeypatch):
    fast = kiln.compile(mlp_layer, passes=[FunctionPass(_reorder, name="Reorder")])
    with pytest.raises(GraphVerificationError, match="after pass Reorder"):
        fast(kiln.randn(2, 3), kiln.randn(3, 4), kiln.randn(4))


def test_verification_is_off_by_default_and_on_with_kiln_debug(monkeypatch):
    monkeypatch.delenv("KILN_DEBUG", raising=False)
    old = debug.set_verify(False)
    try:
        assert not debug.verify_enabled()
        run_pass(FunctionPass(_reorder, name="Reorder"), _traced())  # not checked: no cost by default
        monkeypatch.setenv("KILN_DEBUG", "verify")
        assert debug.verify_enabled()
        with pytest.raises(GraphVerificationError, match="after pass Reorder"):
            run_pass(FunctionPass(_reorder, name="Reorder"), _traced())
        monkeypatch.setenv("KILN_DEBUG", "miss")  # any KILN_DEBUG setting verifies
        assert debug.verify_enabled()
        monkeypatch.setenv("KILN_DEBUG", "0")
        assert not debug.verify_enabled()
    finally:
        debug.set_verify(old)


class _Model(kiln.nn.Module):
    """conv -> layer_norm -> MLP -> softmax: the building blocks the passes see most."""

    def __init__(self):
        super().__init__()
        self.conv = kiln.nn.Conv2d(2, 4, 3, padding=1)
        self.fc1 = kiln.nn.Linear(4 * 5 * 5, 16)
        self.fc2 = kiln.nn.Linear(16, 10)

    def forward(self, x):
        h = self.conv(x).relu()
        h = h.reshape(h.shape[0], -1)
        h = F.layer_norm(h, (h.shape[-1],))
        h = self.fc2(self.fc1(h).relu() + 0.0)
        return F.softmax(h * 1.0, dim=-1)


def _mlp_fn(x, w1, w2):
    return ((x @ w1 + 0.0).relu() @ w2).tanh()


CASES = {
    "mlp": lambda: (kiln.compile(_mlp_fn), (kiln.randn(4, 8), kiln.randn(8, 16, requires_grad=True),
                                            kiln.randn(16, 3, requires_grad=True))),
    "conv+layer_norm+softmax": lambda: (kiln.compile(_Model()), (kiln.randn(3, 2, 5, 5),)),
    "mlp model": lambda: (kiln.compile(kiln.models.mlp()), (kiln.randn(5, 784),)),
    "dynamic_dims": lambda: (kiln.compile(_Model(), dynamic_dims={0: {0: "B"}}), (kiln.randn(3, 2, 5, 5),)),
}


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("case", list(CASES))
def test_every_graph_of_a_real_compile_verifies(case, grad, monkeypatch):
    checked = []
    real_verify = Graph.verify

    def counting_verify(self, *args, **kwargs):
        checked.append(kwargs.get("after", args[0] if args else None))
        return real_verify(self, *args, **kwargs)

    monkeypatch.setattr(Graph, "verify", counting_verify)
    fast, args = CASES[case]()
    with kiln.set_grad_enabled(grad):
        out = fast(*args)
        if grad:
            out.sum().backward()
    logs = [log for _, log in fast._latest_logs]
    assert len(logs) == (2 if grad else 1)
    kept = [[log.input] + [r.graph for r in log.records if r.graph is not None] for log in logs]
    # the hook checked each graph the passes were given and each new graph a pass returned
    assert len(checked) == sum(len(graphs) for graphs in kept), checked
    assert checked.count(None) == len(logs)  # the inputs: no pass ran yet
    assert set(checked) - {None} <= {r.name for log in logs for r in log.records}
    assert any(len(graphs) >= 2 for graphs in kept)  # some pass changed a graph (NoGradStrip, CSE, ...)
    for graphs in kept:  # and every one of them verifies on its own, symbolic dims included
        for g in graphs:
            real_verify(g)
    if case == "dynamic_dims":
        assert "B" in fast.graphs()[0].to_text()


# ---- replace_all_uses / rename_uses --------------------------------------------------------


def test_replace_all_uses_rewires_nodes_outputs_and_state_writes():
    g, a, b, c = _chain()
    g.outputs = [c, b]
    g.state_writes = [StateWrite("arg", 0, b)]
    g.replace_all_uses(b, a)
    assert g.nodes[1].inputs == [a]
    assert g.outputs == [c, a]
    assert g.state_writes[0].value is a
    assert g.nodes[0].out is b  # the definition stays, for DeadNodeElim
    run_pass(DeadNodeElim(), g).verify()


def test_replace_uses_is_the_same_helper():
    assert Graph.replace_uses is Graph.replace_all_uses


def test_rename_uses_maps_several_values_at_once_without_following_chains():
    x = Value((3,), kiln.float32)
    y1, y2, z = (Value((3,), kiln.float32) for _ in range(3))
    g = Graph([x], [InputSpec("arg", 0)], [Node(REGISTRY["exp"], [x], {}, y1), Node(REGISTRY["exp"], [x], {}, y2),
                                            Node(REGISTRY["add"], [y1, y2], {}, z)], [z, y2])
    g.requires_grad = {y2.id}
    g.rename_uses({y2.id: y1, y1.id: x})
    assert g.nodes[2].inputs == [x, y1]  # one lookup per use: y2 -> y1, not on to x
    assert g.outputs == [z, y1]
    assert g.requires_grad == {y2.id}  # untouched unless asked
    g.rename_uses({y1.id: x}, requires_grad=False)
    g2 = g.copy()
    g2.requires_grad = {z.id}
    w = Value((3,), kiln.float32)
    g2.rename_uses({z.id: w}, requires_grad=True)
    assert g2.requires_grad == {z.id, w.id} and g2.outputs[0] is w


def test_rename_uses_leaves_nodes_it_does_not_touch_as_they_were():
    g, a, b, c = _chain()
    before = g.nodes[0].inputs
    g.rename_uses({c.id: b})
    assert g.nodes[0].inputs is before and g.outputs == [b]
    g.rename_uses({})
    assert g.outputs == [b]


def test_node_rename_inputs():
    g, a, b, c = _chain()
    g.nodes[1].rename_inputs({b.id: a})
    assert g.nodes[1].inputs == [a]


def test_passes_that_rename_still_give_the_same_graphs():
    def f(x):
        y = (x * 1.0 + 0.0).exp()
        return (y + (2.0 * 3.0)) + (x * 1.0 + 0.0).exp(), y

    g = trace_graph(f, kiln.randn(3))
    out = run_pass(GenericCompiler(), g)
    assert out.to_text() == """\
{ lambda a:f32[3] ;
  let b:f32[3] = exp a
      c:f32[3] = add b 6.0
      d:f32[3] = add c b
  in (d, b) }"""


# ---- literal elision ------------------------------------------------------------------------


def test_xpr_elides_a_large_closed_over_array():
    big = np.arange(1024, dtype=np.float32)
    text = kiln.xpr(lambda x: x + big, kiln.randn(1024))
    assert "1023.0" not in text and len(text) < 200
    line = text.splitlines()[1]
    assert line.startswith("  let b:f32[1024] = add a f32[1024]{...#") and line.endswith("}")


def test_xpr_prints_a_small_closed_over_array():
    small = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    text = kiln.xpr(lambda x: x * small, kiln.randn(3))
    assert "mul a const[1.0,2.0,3.0]" in text


def test_elided_literals_with_different_values_print_and_hash_differently():
    x = kiln.randn(64)
    one = kiln.xpr(lambda t: t + np.ones(64, np.float32), x)
    two = kiln.xpr(lambda t: t + np.full(64, 2.0, np.float32), x)
    assert one != two and "{...#" in one
    g1 = trace_graph(lambda t: t + np.ones(64, np.float32), x)
    g2 = trace_graph(lambda t: t + np.full(64, 2.0, np.float32), x)
    g3 = trace_graph(lambda t: t + np.ones(64, np.float32), x)
    assert g1.signature() != g2.signature()  # djit keys plans on this: values must count
    assert g1.signature() == g3.signature()


# ---- graphs after each pass: explain(graphs=True) and KILN_DEBUG=graphs ----------------------


def _twice(x):
    return (x * 1.0).exp() + (x * 1.0).exp()


def test_pass_log_keeps_the_graph_after_each_pass_that_changed_it():
    log = PassLog()
    with logging_passes(log):
        run_pass(GenericCompiler(), trace_graph(_twice, kiln.randn(3)))
    labels = [label for label, _ in log.graphs()]
    assert labels[0] == "before the passes"
    assert any(label.startswith("after ArithmeticElimination (") for label in labels)
    assert any(label.startswith("after CSE (") for label in labels)
    texts = [text for _, text in log.graphs()]
    assert all(a != b for a, b in zip(texts, texts[1:]))  # only passes that changed it
    assert texts[-1].count("exp") == 1
    log.drop_graphs()
    assert log.graphs() == [] and log.records  # counts stay, graphs go


def test_explain_with_graphs_shows_each_pass_that_changed_the_graph():
    fast = kiln.compile(_twice)
    assert "graphs of the latest compile: none" in fast.explain(graphs=True)
    x = kiln.randn(3, requires_grad=True)
    fast(x).sum().backward()
    plain = fast.explain()
    report = fast.explain(graphs=True)
    assert report.startswith(plain)
    assert "{ lambda" not in plain
    after = report[len(plain):]
    assert "graphs of the latest compile:" in after
    assert "  forward:" in after and "  backward:" in after
    assert "    before the passes:" in after
    assert "    after ArithmeticElimination (" in after and "    after CSE (" in after
    assert "      { lambda a:f32[3] ;" in after


def test_explain_keeps_the_graphs_of_the_latest_compile_only():
    fast = kiln.compile(_twice, dynamic=False)
    with kiln.no_grad():
        fast(kiln.randn(3))
        (first,) = [log for _, log in fast._latest_logs]
        fast(kiln.randn(4))
    assert first.input is None and all(r.graph is None for r in first.records)
    assert "f32[4]" in fast.explain(graphs=True).split("graphs of the latest compile:")[1]


def test_kiln_debug_graphs_logs_the_graph_after_each_changing_pass(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="kiln.jit")
    monkeypatch.setenv("KILN_DEBUG", "passes,graphs")
    fast = kiln.compile(_twice)
    with kiln.no_grad():
        fast(kiln.randn(3))
    messages = [r.getMessage() for r in caplog.records if r.name == "kiln.jit"]
    graphs = [m for m in messages if m.startswith("graph _twice forward")]
    assert graphs[0].startswith("graph _twice forward before the passes:\n{ lambda a:f32[3] ;")
    assert any(m.startswith("graph _twice forward after ArithmeticElimination (") for m in graphs)
    assert any(m.startswith("graph _twice forward after CSE (") for m in graphs)
    assert all("\n{ lambda" in m for m in graphs)
    # each graph comes right after the line of the pass that made it
    cse_graph = next(i for i, m in enumerate(messages) if m.startswith("graph _twice forward after CSE"))
    assert messages[cse_graph - 1].startswith("pass _twice forward CSE:")


def test_kiln_debug_passes_alone_logs_no_graphs(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="kiln.jit")
    monkeypatch.setenv("KILN_DEBUG", "passes")
    fast = kiln.compile(_twice)
    with kiln.no_grad():
        fast(kiln.randn(3))
    messages = [r.getMessage() for r in caplog.records if r.name == "kiln.jit"]
    assert messages and not any(m.startswith("graph ") for m in messages)
