"""Unit tests of kiln/jit/autodiff.py on its own: trace, differentiate, evaluate the graphs.

The graphs are evaluated by a small node-by-node evaluator written here (each primitive's
kernel on NumPy arrays), not by a backend, so a failure points at `differentiate`. Every
gradient the backward graph computes is compared with eager autograd and with central
finite differences of the forward graph (float64), for random output cotangents (a
cotangent of ones would hide a VJP that ignores its cotangent).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import kiln
import kiln.functional as F
from kiln.jit.autodiff import Differentiated, differentiate
from kiln.jit.ir import Graph, InputSpec
from kiln.jit.pytree import flatten
from kiln.jit.symbolic import is_symbolic, resolve
from kiln.jit.trace import Tracer, symbolic_shape
from kiln.ops.primitive import AbstractValue, Primitive, bind

F64 = kiln.float64


# ---- helpers --------------------------------------------------------------------------------
def trace(fn: Callable, *args: Any, dynamic: dict[int, dict[int, str]] | None = None) -> tuple[Tracer, Any]:
    """Trace ``fn(*args)`` as kiln.compile does: each distinct tensor argument is an "arg" input,
    `dynamic` ({arg index: {dim: name}}) makes dims symbolic, the tensor leaves of the result
    are the outputs. Returns the tracer and the real result."""
    dynamic = dynamic or {}
    tracer = Tracer(fullgraph=True)
    seen: set[int] = set()
    for i, a in enumerate(args):
        if isinstance(a, kiln.Tensor) and id(a) not in seen:
            seen.add(id(a))
            shape = symbolic_shape(a._data.shape, dynamic[i]) if i in dynamic else None
            tracer.add_input(a, InputSpec("arg", i), shape=shape)
    with tracer:
        result = fn(*args)
    tracer.set_outputs([t for t in flatten(result)[0] if isinstance(t, kiln.Tensor)])
    return tracer, result


def diff_of(fn: Callable, *args: Any, dynamic: dict | None = None) -> tuple[Differentiated, Tracer]:
    tracer, _ = trace(fn, *args, dynamic=dynamic)
    return differentiate(tracer.graph, tracer.real, tracer.symbolic), tracer


def evaluate(graph: Graph, inputs: list, dims: dict[str, int] | None = None) -> list:
    """The graph's outputs for input arrays `inputs`, one primitive kernel at a time."""
    assert len(inputs) == len(graph.inputs)
    env = {v.id: a for v, a in zip(graph.inputs, inputs)}
    for node in graph.nodes:
        params = resolve(node.params, dims) if dims is not None and is_symbolic(node.params) else node.params
        env[node.out.id] = node.prim.kernel(np, *[env[v.id] for v in node.inputs], **params)
    return [env[v.id] for v in graph.outputs]


def forward_inputs(graph: Graph, args: list) -> list:
    """The arrays for a forward graph's inputs, with argument arrays `args` (by leaf index)."""
    out = []
    for spec in graph.specs:
        if spec.kind == "arg":
            out.append(args[spec.ref])
        elif spec.kind == "literal":
            out.append(spec.literal)
        elif spec.kind in ("captured", "param", "buffer"):
            out.append(spec.ref._data)
        else:
            raise AssertionError(f"unexpected forward input kind {spec.kind}")
    return out


def backward_inputs(d: Differentiated, residuals: list, cotangents: dict[int, np.ndarray]) -> list:
    out = []
    for spec in d.backward.specs:
        if spec.kind == "residual":
            out.append(residuals[spec.ref])
        elif spec.kind == "cotangent":
            out.append(cotangents[spec.ref])
        elif spec.kind == "literal":
            out.append(spec.literal)
        elif spec.kind == "captured":
            out.append(spec.ref._data)
        else:
            raise AssertionError(f"unexpected backward input kind {spec.kind}")
    return out


def graph_grads(d: Differentiated, args: list, cotangents: dict[int, np.ndarray],
                dims: dict | None = None) -> tuple[list, dict[int, np.ndarray]]:
    """(user outputs, {forward input index: gradient}) from running forward then backward."""
    outs = evaluate(d.forward, forward_inputs(d.forward, args), dims)
    residuals = outs[d.n_outputs:]
    grads = evaluate(d.backward, backward_inputs(d, residuals, cotangents), dims)
    assert len(grads) == len(d.grad_inputs)
    return outs[: d.n_outputs], dict(zip(d.grad_inputs, grads))


def assert_no_dead_nodes(graph: Graph) -> None:
    """Every node of `graph` feeds an output: differentiate builds no gradient nobody reads
    (e.g. for an input that requires no grad)."""
    live = {v.id for v in graph.outputs}
    for node in reversed(graph.nodes):
        assert node.out.id in live, f"dead node in the backward graph: {node}"
        live.update(v.id for v in node.inputs)


def random_cotangents(d: Differentiated, outs: list, rng: np.random.Generator) -> dict[int, np.ndarray]:
    return {i: rng.standard_normal(np.shape(outs[i])) for i in d.cotangent_outputs}


def check_gradients(fn: Callable, arrays: list[np.ndarray], requires: list[bool] | None = None,
                    seed: int = 0, fd_eps: float = 1e-6, rtol: float = 1e-6, atol: float = 1e-8) -> Differentiated:
    """Differentiate fn's trace at `arrays` (float64) and compare the backward graph's gradients
    with eager autograd and with central finite differences of the forward graph."""
    requires = requires if requires is not None else [True] * len(arrays)
    xs = [kiln.tensor(a, dtype=F64, requires_grad=r) for a, r in zip(arrays, requires)]
    d, _ = diff_of(fn, *xs)
    rng = np.random.default_rng(seed)
    fwd = evaluate(d.forward, forward_inputs(d.forward, [a.copy() for a in arrays]))[: d.n_outputs]
    cot = random_cotangents(d, fwd, rng)
    _, grads = graph_grads(d, [a.copy() for a in arrays], cot)
    assert_no_dead_nodes(d.backward)

    # eager autograd with the same cotangents
    eager_outs = [t for t in flatten(fn(*xs))[0] if isinstance(t, kiln.Tensor)]
    for k, o in enumerate(eager_outs):
        np.testing.assert_allclose(fwd[k], o.detach().numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=f"forward output {k} differs from eager")
    pairs = [(eager_outs[i], kiln.tensor(cot[i])) for i in d.cotangent_outputs]
    wrt = [i for i, r in enumerate(requires) if r]
    eager = kiln.autograd.grad([o for o, _ in pairs], [xs[i] for i in wrt], [g for _, g in pairs],
                               allow_unused=True)
    for i, e in zip(wrt, eager):  # every argument is a distinct tensor: leaf i is graph input i
        got = grads.get(i)
        if e is None:
            assert got is None or not np.any(got), f"input {i}: eager has no gradient"
            continue
        assert got is not None, f"input {i}: the backward graph outputs no gradient"
        np.testing.assert_allclose(got, e.numpy(), rtol=1e-10, atol=1e-12, err_msg=f"input {i} vs eager")

    # finite differences of <forward outputs, cotangents>
    def scalar(vals: list) -> float:
        outs = evaluate(d.forward, forward_inputs(d.forward, vals))
        return float(sum((np.asarray(outs[i], dtype=np.float64) * c).sum() for i, c in cot.items()))

    for i in wrt:
        numeric = np.zeros(arrays[i].shape)
        for j in range(arrays[i].size):
            plus = [a.copy() for a in arrays]
            minus = [a.copy() for a in arrays]
            plus[i].reshape(-1)[j] += fd_eps
            minus[i].reshape(-1)[j] -= fd_eps
            numeric.reshape(-1)[j] = (scalar(plus) - scalar(minus)) / (2 * fd_eps)
        got = grads.get(i, np.zeros(arrays[i].shape))
        np.testing.assert_allclose(got, numeric, rtol=rtol, atol=atol, err_msg=f"input {i} vs finite differences")
    return d


def _r(*shape: int, seed: int = 0, positive: bool = False) -> np.ndarray:
    a = np.random.default_rng(seed + 7 * len(shape) + sum(shape)).standard_normal(shape)
    return np.abs(a) + 0.5 if positive else a


# ---- gradients of a table of ops -------------------------------------------------------------
_IDX = np.array([2, 0, 2, 1])  # repeats: the gradient must accumulate

_CASES: dict[str, tuple[Callable, list[np.ndarray]]] = {
    # elementwise
    "mul_add_sin": (lambda x, y: x * y + x.sin(), [_r(3, 4), _r(3, 4, seed=1)]),
    "exp_tanh_sigmoid": (lambda x: x.exp() * x.tanh() + x.sigmoid(), [_r(5)]),
    "div_pow": (lambda x, y: x / y + x ** 3, [_r(4), _r(4, positive=True)]),
    "log_sqrt": (lambda x: x.log() + x.sqrt() * 2.0, [_r(2, 3, positive=True)]),
    "relu_maximum_where": (lambda x, y: x.relu() + kiln.maximum(x, y) + kiln.where(x > y, x * y, y),
                           [_r(6), _r(6, seed=3)]),
    "scalar_ops": (lambda x: (2.0 - x) * 3.0 / (x * x + 1.0), [_r(4)]),
    # broadcasting and reductions
    "broadcast_add_mul": (lambda x, b, s: (x + b) * s, [_r(3, 4), _r(4), _r(3, 1)]),
    "sum_mean": (lambda x: x.sum(0) * x.mean(-1, keepdim=True), [_r(3, 4)]),
    "max_over_axis": (lambda x: x.max(1).values + kiln.amax(x, 0).sum(), [_r(3, 5)]),
    "logsumexp_var": (lambda x: kiln.logsumexp(x, 1) + x.var(0).sum(), [_r(3, 4)]),
    # matmul
    "matmul": (lambda x, w: x @ w, [_r(3, 4), _r(4, 2)]),
    "batched_matmul_broadcast": (lambda a, b: kiln.matmul(a, b), [_r(2, 3, 4), _r(4, 5)]),
    "bmm_linear": (lambda x, w, b: F.linear(kiln.bmm(x, x.transpose(1, 2)), w, b),
                   [_r(2, 3, 3), _r(4, 3), _r(4)]),
    # composites
    "softmax": (lambda x: F.softmax(x, -1), [_r(3, 5)]),
    "log_softmax": (lambda x: F.log_softmax(x, 0), [_r(3, 5)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (4,), w, b), [_r(3, 4), _r(4), _r(4)]),
    "cross_entropy": (lambda x: F.cross_entropy(x, kiln.tensor([1, 0, 3])), [_r(3, 4)]),
    # movement
    "reshape_permute": (lambda x: x.reshape(2, 3, 2).permute(2, 0, 1) * 1.5, [_r(3, 4)]),
    "transpose_expand": (lambda x: x.t().unsqueeze(0).expand(2, 4, 3).sum(0), [_r(3, 4)]),
    "cat_stack": (lambda x, y: kiln.cat([x, y * 2], 0) * kiln.stack([x, y], 0).reshape(4, 3),
                  [_r(2, 3), _r(2, 3, seed=2)]),
    "split_chunk": (lambda x: kiln.split(x, [1, 3], 1)[1] * kiln.chunk(x, 2, 1)[0].sum(), [_r(2, 4)]),
    "squeeze_flip_pad": (lambda x: F.pad(kiln.flip(x.unsqueeze(1), 0).squeeze(1), (1, 2)), [_r(3, 4)]),
    "slicing": (lambda x: x[:, 1:3] * x[..., ::2] + x[1, :2] - x[-1:, kiln.tensor([3, 0])], [_r(3, 4)]),
    "narrow_select": (lambda x: kiln.narrow(x, 0, 1, 2) * kiln.select(x, 1, 0).unsqueeze(0).t()[:2],
                      [_r(3, 4)]),
    # gather / index
    "int_tensor_index": (lambda x: x[kiln.tensor(_IDX)] * 2.0, [_r(3, 4)]),
    "gather": (lambda x: kiln.gather(x, 1, kiln.tensor([[0, 0], [3, 1], [2, 2]])), [_r(3, 4)]),
    "take_along_dim": (lambda x: kiln.take_along_dim(x, kiln.tensor([[1], [0], [3]]), 1), [_r(3, 4)]),
    "index_select": (lambda x: kiln.index_select(x, 0, kiln.tensor(_IDX)), [_r(3, 4)]),
    "embedding": (lambda w: F.embedding(kiln.tensor([[0, 2], [2, 1]]), w), [_r(3, 4)]),
    "masked_fill": (lambda x: kiln.masked_fill(x, kiln.tensor([True, False, True, False]), 0.5) * x,
                    [_r(3, 4)]),
    "scatter_add": (lambda x, s: kiln.scatter_add(x, 1, kiln.tensor([[0, 1], [1, 1], [3, 0]]), s),
                    [_r(3, 4), _r(3, 2)]),
    # in-place updates of intermediates
    "inplace_add_mul": (lambda x, y: (x * 1.0).add_(y).mul_(y), [_r(3), _r(3, seed=5)]),
    "inplace_setitem": (lambda x, y: _setitem(x * 2.0, y), [_r(3, 4), _r(4, seed=6)]),
    "inplace_activation": (lambda x: (x + 0.25).tanh_() * x, [_r(5)]),
}


def _setitem(t: kiln.Tensor, v: kiln.Tensor) -> kiln.Tensor:
    t[1] = v * v
    return t


@pytest.mark.parametrize("name", sorted(_CASES))
def test_backward_graph_matches_eager_and_finite_differences(name):
    fn, arrays = _CASES[name]
    d = check_gradients(fn, arrays)
    assert d.grad_inputs, "some input must get a gradient"


# ---- which outputs and inputs take part ------------------------------------------------------
def test_outputs_without_a_cotangent_integer_and_non_differentiable():
    x = kiln.tensor(_r(3, 4), dtype=F64, requires_grad=True)
    c = kiln.tensor(_r(3, 4, seed=1), dtype=F64)  # needs no grad

    def fn(x, c):
        return x * 2.0, x.argmax(1), c.exp(), (x * x).sum()

    d, _ = diff_of(fn, x, c)
    assert d.n_outputs == 4
    assert d.cotangent_outputs == [0, 3]  # the int output and the output that needs no grad take none
    assert [s.ref for s in d.backward.specs if s.kind == "cotangent"] == [0, 3]
    rng = np.random.default_rng(1)
    cot = {0: rng.standard_normal((3, 4)), 3: np.asarray(rng.standard_normal())}
    outs, grads = graph_grads(d, [x.detach().numpy(), c.detach().numpy()], cot)
    np.testing.assert_array_equal(outs[1], x.detach().numpy().argmax(1))
    np.testing.assert_allclose(outs[2], np.exp(c.detach().numpy()), rtol=1e-12)
    np.testing.assert_allclose(grads[0], 2.0 * cot[0] + 2 * x.detach().numpy() * cot[3], rtol=1e-12)
    assert set(grads) == {0}  # c requires no grad: no gradient output for it


def test_multiple_outputs_sum_their_cotangents():
    check_gradients(lambda x, w: (x @ w, (x * x).sum(1), w.tanh()), [_r(3, 4), _r(4, 2)])


def test_the_same_value_returned_twice_gets_both_cotangents():
    x = kiln.tensor(_r(4), dtype=F64, requires_grad=True)

    def fn(x):
        y = x.sin()
        return y, y

    d, _ = diff_of(fn, x)
    assert d.cotangent_outputs == [0, 1]
    a, b = np.arange(4.0), np.full(4, 10.0)
    _, grads = graph_grads(d, [x.detach().numpy()], {0: a, 1: b})
    np.testing.assert_allclose(grads[0], np.cos(x.detach().numpy()) * (a + b), rtol=1e-12)


def test_an_input_returned_as_is_passes_its_cotangent_through():
    x = kiln.tensor(_r(3), dtype=F64, requires_grad=True)
    d, _ = diff_of(lambda x: (x, x * 3.0), x)
    _, grads = graph_grads(d, [x.detach().numpy()], {0: np.ones(3), 1: np.full(3, 2.0)})
    np.testing.assert_allclose(grads[0], np.full(3, 7.0))


def test_inputs_that_do_not_require_grad_get_no_gradient():
    x = kiln.tensor(_r(3, 4), dtype=F64, requires_grad=True)
    w = kiln.tensor(_r(4, 2), dtype=F64)  # no grad
    b = kiln.tensor(_r(2), dtype=F64, requires_grad=True)
    d, _ = diff_of(lambda x, w, b: (x @ w + b).tanh(), x, w, b)
    assert d.grad_inputs == [0, 2]
    assert len(d.backward.outputs) == 2
    # no gradient is computed for w at all (not even as dead code): one matmul (g @ w^T), no [4,2] value
    assert [n.prim.name for n in d.backward.nodes].count("matmul") == 1
    assert all(tuple(n.out.shape) != (4, 2) for n in d.backward.nodes)
    check_gradients(lambda x, w, b: (x @ w + b).tanh(), [x.detach().numpy(), w.detach().numpy(), b.detach().numpy()],
                    requires=[True, False, True])


class _GreedyMul(Primitive):
    """x * y whose VJP returns both gradients whether or not the inputs require grad."""

    saves_inputs = (0, 1)

    def __init__(self) -> None:
        self.name = "greedy_mul_for_tests"  # set on the instance: not registered

    def abstract(self, a: AbstractValue, b: AbstractValue) -> AbstractValue:
        return a

    def kernel(self, xp: Any, a: Any, b: Any) -> Any:
        return a * b

    def vjp(self, g: kiln.Tensor, inputs: tuple, node: Any) -> tuple:
        a, b = inputs
        return g * b, g * a


def test_a_vjp_that_returns_every_gradient_builds_none_for_inputs_that_need_none():
    x = kiln.tensor(_r(4), dtype=F64, requires_grad=True)
    c = kiln.tensor(_r(4, seed=1), dtype=F64)
    greedy = _GreedyMul()
    d, _ = diff_of(lambda x, c: bind(greedy, (x.sin(), c.cos()), {}), x, c)
    assert d.grad_inputs == [0]
    # the VJP itself builds g * sin(x) for cos(c) (dead code, for DCE), but it goes no further:
    # cos's VJP (-sin(c) * g) is not traced
    names = [n.prim.name for n in d.backward.nodes]
    assert "sin" not in names and "neg" not in names, d.backward
    _, grads = graph_grads(d, [x.detach().numpy(), c.detach().numpy()], {0: np.ones(4)})
    np.testing.assert_allclose(grads[0], np.cos(x.detach().numpy()) * np.cos(c.detach().numpy()), rtol=1e-12)


def test_an_unused_input_gets_no_gradient_output():
    x = kiln.tensor(_r(3), dtype=F64, requires_grad=True)
    y = kiln.tensor(_r(3), dtype=F64, requires_grad=True)
    d, _ = diff_of(lambda x, y: x.exp(), x, y)
    assert d.grad_inputs == [0]


def test_no_output_needs_grad_gives_an_empty_backward():
    x = kiln.tensor(_r(3), dtype=F64)
    d, _ = diff_of(lambda x: x.exp(), x)
    assert d.cotangent_outputs == [] and d.grad_inputs == []
    assert d.backward.nodes == [] and d.backward.outputs == []
    assert d.forward.outputs == d.forward.outputs[: d.n_outputs]  # no residuals


def test_the_traced_graph_is_left_unchanged():
    x = kiln.tensor(_r(3, 4), dtype=F64, requires_grad=True)
    tracer, _ = trace(lambda x: x.exp().sum(), x)
    before = tracer.graph.signature()
    d = differentiate(tracer.graph, tracer.real, False)
    assert tracer.graph.signature() == before
    assert len(tracer.graph.outputs) == 1 and len(d.forward.outputs) > 1


# ---- residuals -------------------------------------------------------------------------------
def _residual_shapes(d: Differentiated) -> list[tuple]:
    return [tuple(v.shape) for v in d.forward.outputs[d.n_outputs:]]


def test_residuals_are_forward_outputs_after_the_user_outputs():
    x = kiln.tensor(_r(3, 4), dtype=F64, requires_grad=True)
    d, _ = diff_of(lambda x: (F.softmax(x, -1) * x.sin(), x.exp().sum()), x)
    assert d.n_outputs == 2 and d.forward.outputs[:2] == d.forward.outputs[:d.n_outputs]
    residuals = [(v, s) for v, s in zip(d.backward.inputs, d.backward.specs) if s.kind == "residual"]
    assert len(residuals) > 2
    # residual k of the backward graph is forward output n_outputs + k, with the same type
    assert [s.ref for _, s in residuals] == list(range(len(d.forward.outputs) - d.n_outputs))
    for v, s in residuals:
        fwd = d.forward.outputs[d.n_outputs + s.ref]
        assert fwd.shape == v.shape and fwd.dtype is v.dtype


def test_exp_saves_only_its_output_and_sum_saves_nothing():
    x = kiln.tensor(_r(3, 4), dtype=F64, requires_grad=True)
    d, _ = diff_of(lambda x: x.exp().sum(), x)
    exp_out = d.forward.nodes[0].out
    assert d.forward.nodes[0].prim.name == "exp"
    assert d.forward.outputs[d.n_outputs:] == [exp_out]  # not x: exp's VJP reads its output


def test_sin_saves_its_input_not_its_output():
    x = kiln.tensor(_r(3, 4), dtype=F64, requires_grad=True)
    d, _ = diff_of(lambda x: x.sin(), x)
    assert d.forward.outputs[d.n_outputs:] == [d.forward.inputs[0]]


def test_matmul_saves_each_operand_once_even_when_both_need_grad():
    x = kiln.tensor(_r(3, 4), dtype=F64, requires_grad=True)
    w = kiln.tensor(_r(4, 2), dtype=F64, requires_grad=True)
    d, _ = diff_of(lambda x, w: (x @ w).sum(), x, w)
    residuals = d.forward.outputs[d.n_outputs:]
    assert sorted(map(id, residuals)) == sorted(map(id, d.forward.inputs[:2]))


def test_matmul_saves_only_the_operand_the_needed_gradient_reads():
    x = kiln.tensor(_r(3, 4), dtype=F64, requires_grad=True)
    w = kiln.tensor(_r(4, 2), dtype=F64)
    d, _ = diff_of(lambda x, w: (x @ w).sum(), x, w)
    # x's gradient (g @ w^T) reads w; x itself is read only by w's gradient, which is not built
    assert d.forward.outputs[d.n_outputs:] == [d.forward.inputs[1]]
    assert d.grad_inputs == [0]


def test_a_literal_scale_needs_no_tensor_sized_residual():
    x = kiln.tensor(_r(3, 4), dtype=F64, requires_grad=True)
    d, _ = diff_of(lambda x: (x * 2.0).sum(), x)
    # the backward of sum(x * 2) needs only the scalar 2.0, never x nor x * 2
    assert all(s == () for s in _residual_shapes(d)), _residual_shapes(d)


def test_a_value_read_by_several_vjps_is_saved_once():
    x = kiln.tensor(_r(3, 4), dtype=F64, requires_grad=True)
    d, _ = diff_of(lambda x: (x * x * x).sum(), x)  # x is read by both multiplications' VJPs
    residual_ids = [v.id for v in d.forward.outputs[d.n_outputs:]]
    assert len(residual_ids) == len(set(residual_ids))


def test_softmax_residual_count():
    x = kiln.tensor(_r(3, 5), dtype=F64, requires_grad=True)
    d, _ = diff_of(lambda x: F.softmax(x, -1), x)
    shapes = _residual_shapes(d)
    # what the composite's VJPs read today: no copy of the input x, at most three [3,5] tensors
    assert d.forward.inputs[0] not in d.forward.outputs[d.n_outputs:]
    assert sum(1 for s in shapes if s == (3, 5)) <= 3


# ---- symbolic (dynamic) dims -----------------------------------------------------------------
def test_symbolic_dims_reach_the_backward_graph():
    x = kiln.tensor(_r(5, 4), dtype=F64, requires_grad=True)
    w = kiln.tensor(_r(4, 3), dtype=F64, requires_grad=True)
    def fn(x, w):
        p = F.softmax(x @ w, -1)
        return p.sum(0), p * 2.0

    d, tracer = diff_of(fn, x, w, dynamic={0: {0: "B"}})
    assert tracer.symbolic
    cot_values = [v for v, s in zip(d.backward.inputs, d.backward.specs) if s.kind == "cotangent"]
    assert [[str(dim) for dim in v.shape] for v in cot_values] == [["3"], ["B", "3"]]
    (gx,) = [v for i, v in zip(d.grad_inputs, d.backward.outputs) if i == 0]
    assert str(gx.shape[0]) == "B" and gx.shape[1] == 4
    residuals = [v for v, s in zip(d.backward.inputs, d.backward.specs) if s.kind == "residual"]
    # the traced batch size (5) appears in no residual's type: it is B wherever it occurs
    assert residuals and not any(type(dim) is int and dim == 5 for v in residuals for dim in v.shape)
    assert any(str(v.shape[0]) == "B" for v in residuals if v.shape)
    assert any(is_symbolic(n.out.shape) for n in d.backward.nodes)

    # the same backward graph runs at another batch size
    for batch in (5, 7):
        xa, wa = _r(batch, 4, seed=batch), w.detach().numpy()
        rng = np.random.default_rng(batch)
        cot = {0: rng.standard_normal(3), 1: rng.standard_normal((batch, 3))}
        _, grads = graph_grads(d, [xa, wa], cot, dims={"B": batch})
        xt = kiln.tensor(xa, dtype=F64, requires_grad=True)
        wt = kiln.tensor(wa, dtype=F64, requires_grad=True)
        ex, ew = kiln.autograd.grad(list(fn(xt, wt)), [xt, wt], [kiln.tensor(cot[0]), kiln.tensor(cot[1])])
        np.testing.assert_allclose(grads[0], ex.detach().numpy(), rtol=1e-10)
        np.testing.assert_allclose(grads[1], ew.detach().numpy(), rtol=1e-10)


def test_differentiate_frees_the_gradients_it_is_done_with():
    """The backward tracer holds the VJPs' tensors weakly: at real sizes, keeping every one until the
    backward graph is built doubled a compile's memory (a CIFAR ResNet-18: 2.9 GB instead of 1.4)."""
    import tracemalloc  # noqa: PLC0415

    w = kiln.randn(256, 512, requires_grad=True)

    def chain(x):
        h = x
        for _ in range(12):
            h = (h * w + 1.0).tanh()
        return h.sum()

    tracer, _ = trace(chain, kiln.randn(256, 512))
    one = 256 * 512 * 4
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        d = differentiate(tracer.graph, tracer.real, False)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 4 * one, f"{kept / one:.1f} arrays of the chain's size kept after differentiate"
    assert len(d.backward.outputs) == 1 and len(d.backward.nodes) > 12  # w's gradient, through the chain
