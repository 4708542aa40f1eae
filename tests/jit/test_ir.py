"""The IR: xpr text, show_graph printing, DOT output, signatures and graph editing."""
from __future__ import annotations

import re

import numpy as np

import kiln
from kiln.jit.api import trace_graph
from kiln.jit.ir import Graph, InputSpec, Node, Value, param_key
from kiln.ops.primitive import REGISTRY


def mlp_layer(a, w, b):
    return kiln.relu(a @ w + b)


def example_inputs():
    return kiln.randn(2, 3), kiln.randn(3, 4), kiln.randn(4)


MLP_LAYER_XPR = """\
{ lambda a:f32[2,3] b:f32[3,4] c:f32[4] ;
  let d:f32[2,4] = matmul a b
      e:f32[2,4] = add d c
      f:f32[2,4] = relu e
  in (f) }"""


# ---- xpr text -------------------------------------------------------------------------


def test_xpr_of_a_small_function_matches_exactly():
    assert kiln.xpr(mlp_layer, *example_inputs()) == MLP_LAYER_XPR


def test_print_graph_is_xpr():
    g = trace_graph(mlp_layer, *example_inputs())
    assert str(g) == g.to_text() == MLP_LAYER_XPR


def test_xpr_prints_literals_params_dtypes_and_several_outputs():
    def f(x, n):
        s = (x * 2.5).sum(axis=1, keepdims=True)
        return s + 1e-5, n + 1

    text = kiln.xpr(f, kiln.randn(2, 3).double(), kiln.tensor([1, 2], dtype="int64"))
    assert text == """\
{ lambda a:f64[2,3] b:i64[2] ;
  let c:f64[2,3] = mul a 2.5
      d:f64[2,1] = sum[axes=(1,) keepdims=True] c
      e:f64[2,1] = add d 1e-05
      f:i64[2] = add b 1
  in (e, f) }"""


def test_xpr_float32_literals_print_at_their_own_precision():
    text = kiln.xpr(lambda x: x * 0.1 + 0.9, kiln.randn(3))
    assert "mul a 0.1" in text and "add b 0.9" in text
    assert "0.10000000149" not in text


def test_xpr_of_an_identity_and_of_a_pytree():
    assert kiln.xpr(lambda x: x, kiln.randn(2)) == "{ lambda a:f32[2] ;\n  in (a) }"
    text = kiln.xpr(lambda d: {"s": d["x"] + d["y"]}, {"x": kiln.randn(2), "y": kiln.randn(2)})
    assert text == "{ lambda a:f32[2] b:f32[2] ;\n  let c:f32[2] = add a b\n  in (c) }"


def test_xpr_shows_state_writes():
    def f(x):
        x.add_(1.0)
        return x * 2

    text = kiln.xpr(f, kiln.randn(2))
    assert text == """\
{ lambda a:f32[2] ;
  let b:f32[2] = add a 1.0
      c:f32[2] = mul b 2.0
  write arg[0] <- b
  in (c) }"""


def test_module_graph_names_its_written_buffers():
    bn = kiln.compile(kiln.nn.BatchNorm1d(3))
    with kiln.no_grad():
        bn(kiln.randn(4, 3))
    text = bn.graphs()[0].to_text()
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert re.search(rf"^  write {name} <- \w+$", text, re.M), text


def test_many_values_get_two_letter_names():
    def f(x):
        for _ in range(30):
            x = x + 1
        return x

    text = kiln.xpr(f, kiln.randn(1))
    assert "ba:f32[1] = add z 1.0" in text
    assert text.endswith("in (be) }")


# ---- show_graph --------------------------------------------------------------------------


def test_jit_show_graph_prints_on_first_compile_only(capsys):
    f = kiln.jit(mlp_layer, show_graph=True)
    args = example_inputs()
    with kiln.no_grad():
        f(*args)
        first = capsys.readouterr().out
        f(*args)
        f(*example_inputs())
        again = capsys.readouterr().out
    assert MLP_LAYER_XPR in first
    assert again == ""


def test_jit_without_show_graph_prints_nothing(capsys):
    f = kiln.jit(mlp_layer)
    with kiln.no_grad():
        f(*example_inputs())
    assert capsys.readouterr().out == ""


def test_djit_show_graph_prints_each_new_structure_once(capsys):
    f = kiln.djit(show_graph=True)(mlp_layer)
    with kiln.no_grad():
        f(*example_inputs())
        assert "matmul" in capsys.readouterr().out
        f(*example_inputs())
        assert capsys.readouterr().out == ""


# ---- DOT ---------------------------------------------------------------------------------


def test_to_dot_is_valid_looking_dot_with_an_edge_per_input_use():
    def f(a, w, b):
        h = a @ w + b
        return h * h, h.sum()

    g = trace_graph(f, *example_inputs())
    dot = g.to_dot()
    assert dot.startswith("digraph")
    assert dot.rstrip().endswith("}")
    assert dot.count("{") == dot.count("}") == 1
    edges = re.findall(r"^\s*(\w+) -> (\w+);$", dot, re.M)
    uses = sum(len(n.inputs) for n in g.nodes)
    assert len(edges) == uses + len(g.outputs)
    declared = set(re.findall(r"^\s*(\w+) \[label=", dot, re.M))
    for src, dst in edges:
        assert src in declared and dst in declared
    # the node `h * h` uses h twice: two edges into it
    mul = next(n for n in g.nodes if n.prim.name == "mul")
    assert edges.count((f"v{mul.inputs[0].id}", f"v{mul.out.id}")) == 2
    labels = re.findall(r'label="([^"]*)"', dot)
    assert any("matmul" in label for label in labels)
    assert any("arg" in label and "f32[2,3]" in label for label in labels)


# ---- signatures --------------------------------------------------------------------------


def test_signature_ignores_values_but_not_structure():
    f = lambda x: (x * 2).exp()  # noqa: E731
    g1 = trace_graph(f, kiln.randn(2, 3))
    g2 = trace_graph(f, kiln.randn(2, 3))
    assert g1.signature() == g2.signature()
    assert g1.structure_hash() == g2.structure_hash()
    assert trace_graph(lambda x: (x * 3).exp(), kiln.randn(2, 3)).signature() != g1.signature()
    assert trace_graph(f, kiln.randn(2, 4)).signature() != g1.signature()
    assert trace_graph(f, kiln.randn(2, 3).double()).signature() != g1.signature()
    assert trace_graph(lambda x: (x * 2).sin(), kiln.randn(2, 3)).signature() != g1.signature()
    assert trace_graph(lambda x: x.sum(axis=0), kiln.randn(2, 3)).signature() != \
        trace_graph(lambda x: x.sum(axis=1), kiln.randn(2, 3)).signature()


def test_param_key_distinguishes_ints_floats_signed_zero_and_keeps_nan_equal():
    assert param_key({"v": 1}) != param_key({"v": 1.0})
    assert param_key({"v": 0.0}) != param_key({"v": -0.0})
    assert param_key({"v": float("nan")}) == param_key({"v": float("nan")})
    assert param_key({"a": 1, "b": (2, 3)}) == param_key({"b": (2, 3), "a": 1})
    assert param_key({"s": (1, 2)}) != param_key({"s": (1, 2, 3)})


# ---- editing -----------------------------------------------------------------------------


def _two_node_graph():
    a = Value((3,), kiln.float32)
    b = Value((3,), kiln.float32)
    g = Graph([a], [InputSpec("arg", 0)])
    g.nodes.append(Node(REGISTRY["exp"], [a], {}, b))
    c = Value((3,), kiln.float32)
    g.nodes.append(Node(REGISTRY["neg"], [b], {}, c))
    g.outputs = [c]
    return g, a, b, c


def test_copy_is_independent():
    g, a, b, c = _two_node_graph()
    h = g.copy()
    h.nodes[1].inputs = [a]
    h.nodes.pop(0)
    h.outputs.append(a)
    assert len(g.nodes) == 2 and g.nodes[1].inputs == [b] and g.outputs == [c]


def test_replace_uses_rewires_nodes_outputs_and_writes():
    g, a, b, c = _two_node_graph()
    from kiln.jit.ir import StateWrite

    g.outputs = [c, b]
    g.state_writes = [StateWrite("arg", 0, b)]
    g.replace_uses(b, a)
    assert g.nodes[1].inputs == [a]
    assert g.outputs == [c, a]
    assert g.state_writes[0].value is a


def test_producers_users_and_live_roots():
    g, a, b, c = _two_node_graph()
    assert g.producers()[c.id].prim.name == "neg"
    assert [n.prim.name for n in g.users()[a.id]] == ["exp"]
    assert g.live_roots() == [c]
    assert g.input_ids() == {a.id}


def test_value_type_strings():
    assert Value((2, 3), kiln.float32).type_str() == "f32[2,3]"
    assert Value((), kiln.int64).type_str() == "i64[]"
    assert Value((4,), kiln.bool_).type_str() == "bool[4]"
    assert Value((4,), kiln.float16).type_str() == "f16[4]"
    assert np.dtype("float32") == Value((1,), kiln.float32).dtype.np
