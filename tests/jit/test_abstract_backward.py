"""Backward graphs traced from shapes alone (kiln/jit/abstract_backward.py) against the same graphs traced
with values, as `differentiate` traced them before: the same nodes, shapes, dtypes and params, the same
residuals, and the same layouts the trace saw. Then: tracing from shapes computes nothing, and a VJP that
needs values still gets them."""
from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np
import pytest

import kiln
import kiln.functional as F
from kiln import nn
from kiln.jit import autodiff
from kiln.jit.abstract_backward import Unevaluated, ValuesNeeded
from kiln.jit.ir import InputSpec
from kiln.jit.pytree import flatten
from kiln.jit.trace import Tracer, symbolic_shape
from kiln.ops.primitive import REGISTRY, AbstractValue, Primitive, bind


def _trace(fn: Callable, *args: Any, dynamic: dict | None = None) -> Tracer:
    tracer = Tracer(fullgraph=True)
    for i, a in enumerate(args):
        shape = symbolic_shape(a._data.shape, dynamic[i]) if dynamic and i in dynamic else None
        tracer.add_input(a, InputSpec("arg", i), shape=shape)
    with tracer:
        result = fn(*args)
    tracer.set_outputs([t for t in flatten(result)[0] if isinstance(t, kiln.Tensor)])
    tracer.keep.append(result)
    return tracer


def _layouts(graph: Any, strides: dict) -> list:
    """The recorded strides by position (value ids differ between two traces)."""
    return [strides.get(v.id) for v in [*graph.inputs, *(n.out for n in graph.nodes)]]


def _both(fn: Callable, *args: Any, dynamic: dict | None = None) -> tuple:
    tracer = _trace(fn, *args, dynamic=dynamic)
    shapes = autodiff._differentiate(tracer.graph, tracer.real, tracer.symbolic, shapes_alone=True)
    values = autodiff._differentiate(tracer.graph, tracer.real, tracer.symbolic, shapes_alone=False)
    return shapes, values


def _assert_same(fn: Callable, *args: Any, dynamic: dict | None = None) -> None:
    shapes, values = _both(fn, *args, dynamic=dynamic)
    assert shapes.backward.nodes, "nothing to compare: the backward graph is empty"
    assert shapes.backward.to_text() == values.backward.to_text()
    assert shapes.forward.to_text() == values.forward.to_text()  # the same residuals
    assert (shapes.n_outputs, shapes.cotangent_outputs, shapes.grad_inputs) == \
        (values.n_outputs, values.cotangent_outputs, values.grad_inputs)
    assert _layouts(shapes.backward, shapes.backward_strides) == _layouts(values.backward, values.backward_strides)
    assert [str(g) for g in shapes.shape_guards] == [str(g) for g in values.shape_guards]


def _t(*shape: int, seed: int = 0, grad: bool = True) -> kiln.Tensor:
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return kiln.tensor(data, requires_grad=grad)


def _module_loss(module: nn.Module, target: kiln.Tensor | None = None) -> Callable:
    def loss(x: kiln.Tensor) -> kiln.Tensor:
        out = module(x)
        out = out[0] if isinstance(out, tuple) else out
        return F.cross_entropy(out, target) if target is not None else (out * out).mean()
    return loss


def test_a_conv_net_with_batch_norm_pooling_and_cross_entropy():
    kiln.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
    target = kiln.tensor(np.array([0, 3, 4, 1]))
    _assert_same(_module_loss(net, target), _t(4, 3, 12, 12))


def test_a_transformer_encoder_layer():
    kiln.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
    _assert_same(_module_loss(layer), _t(2, 5, 16))


def test_an_lstm_and_an_embedding():
    kiln.manual_seed(0)
    emb, lstm = nn.Embedding(20, 6), nn.LSTM(6, 7, num_layers=2)
    tokens = kiln.tensor(np.array([[1, 4, 19], [0, 2, 2]]))
    _assert_same(lambda w: (lstm(F.embedding(tokens, w))[0] ** 2).sum(), emb.weight)


def test_views_with_transposed_broadcast_and_reversed_layouts():
    def fn(x: kiln.Tensor, y: kiln.Tensor) -> kiln.Tensor:
        a = x.permute(2, 0, 1)  # transposed layout
        b = a.flip(0)  # negative strides
        c = y.unsqueeze(1).expand(4, 3, 5)  # zero strides
        d = b * c
        return (d[:, 1:, ::2].sum(-1) ** 2).sum() + (x.transpose(0, 1).reshape(-1) ** 3).sum()
    _assert_same(fn, _t(3, 5, 4), _t(4, 5, seed=1))


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "gelu", "layer_norm", "cumsum", "max", "gather",
                                  "where", "pad", "index_put", "matmul_batched", "einsum", "sort", "reductions",
                                  "cast", "topk", "cat_stack", "pow_max_prod", "var_norm", "scatter_add"])
def test_one_op_family(name: str):
    x = _t(3, 4, 6)
    idx = kiln.tensor(np.array([[[0, 5, 2]] * 4] * 3))
    fns = {
        "softmax": lambda x: (F.softmax(x, -1) ** 2).sum(),
        "log_softmax": lambda x: (F.log_softmax(x, 1) * x).sum(),
        "gelu": lambda x: F.gelu(x).sum() + F.gelu(x, approximate="tanh").mean(),
        "layer_norm": lambda x: (F.layer_norm(x, (6,)) ** 2).sum(),
        "cumsum": lambda x: (x.cumsum(1) ** 2).sum(),
        "max": lambda x: x.max(-1).values.sum() + x.amax(dim=(0, 2)).sum(),
        "gather": lambda x: (x.gather(2, idx) ** 2).sum(),
        "where": lambda x: kiln.where(x > 0, x * 2, x.exp()).sum(),
        "pad": lambda x: (F.pad(x, (1, 2, 0, 1)) ** 2).sum(),
        "index_put": lambda x: (x[:, [0, 2]] ** 2).sum() + x[1, 2:, ::3].sum(),
        "matmul_batched": lambda x: ((x @ x.transpose(1, 2)) ** 2).sum(),
        "einsum": lambda x: kiln.einsum("bij,bkj->bik", x, x).sum(),
        "sort": lambda x: (x.sort(-1).values * kiln.arange(6.0)).sum(),
        "reductions": lambda x: (x.sum((0, 2), keepdim=True) * x).mean() + x.transpose(0, 2).mean(1).sum(),
        "cast": lambda x: (x.double().transpose(1, 2) ** 2).sum().float(),
        "topk": lambda x: x.topk(2, dim=1).values.sum(),
        "cat_stack": lambda x: (kiln.cat([x, x.flip(2)], 1) ** 2).sum() + kiln.stack([x, x * 2], -1).amax(),
        "pow_max_prod": lambda x: (x.abs() ** 1.5).sum() + kiln.maximum(x, x.transpose(1, 2)[:, :4, :4].mean(
            0, keepdim=True).repeat(3, 1, 1).transpose(1, 2).repeat(1, 1, 2)[:, :, :6]).sum() + x[0, 0].prod(),
        "var_norm": lambda x: x.var(1).sum() + x.norm(dim=-1).sum(),
        "scatter_add": lambda x: (kiln.zeros(5, 6).scatter_add(0, kiln.tensor(np.array([[0, 4, 0, 1, 1, 2]] * 3)),
                                                               x[0, :3]) ** 2).sum(),
    }
    _assert_same(fns[name], x)


def test_symbolic_dims():
    kiln.manual_seed(0)
    lin = nn.Linear(6, 3)
    _assert_same(lambda x: (F.relu(lin(x)) ** 2).mean(), _t(5, 6), dynamic={0: {0: "B"}})


def test_tracing_from_shapes_computes_nothing(monkeypatch: pytest.MonkeyPatch):
    """The heavy ops of a backward (convolution gradients, matmuls) never run while the graph is traced."""
    kiln.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    tracer = _trace(_module_loss(net), _t(2, 2, 8, 8))
    ran: list[str] = []
    for prim in ("conv2d_input_grad", "conv2d_weight_grad", "conv2d", "matmul", "mul", "relu"):
        cls = type(REGISTRY[prim])

        def counted(self: Primitive, *arrays: Any, _name: str = prim, _kernel: Any = cls.kernel, **params: Any) -> Any:
            ran.append(_name)
            return _kernel(self, *arrays, **params)
        monkeypatch.setattr(cls, "kernel", counted)
    d = autodiff.differentiate(tracer.graph, tracer.real, False)
    assert ran == []
    assert {n.prim.name for n in d.backward.nodes} >= {"conv2d_weight_grad", "matmul"}


class _ReadsItsGradient(Primitive):
    """An op whose VJP reads a value it computes: tracing its backward from shapes alone cannot work (named
    after the class is made: a class that names itself would be registered as one of kiln's primitives)."""

    def abstract(self, x: AbstractValue) -> AbstractValue:
        return x

    def kernel(self, xp: Any, x: Any) -> Any:
        return x * 2

    def vjp(self, g: kiln.Tensor, inputs: tuple, node: Any) -> tuple:
        doubled = g * 2
        scale = float(np.asarray(doubled._data).reshape(-1)[0]) * 0 + 1  # reads the values, whatever they are
        return (doubled * scale,)


def test_a_vjp_that_reads_values_is_traced_again_with_them(caplog: pytest.LogCaptureFixture):
    prim = _ReadsItsGradient()
    prim.name = "test_reads_its_gradient"
    x = _t(3, 4)
    tracer = _trace(lambda x: (bind(prim, (x,), {}) * x).sum(), x)
    with pytest.raises(ValuesNeeded):
        autodiff._differentiate(tracer.graph, tracer.real, False, shapes_alone=True)
    with caplog.at_level(logging.DEBUG, logger="kiln.jit"):
        d = autodiff.differentiate(tracer.graph, tracer.real, False)
    assert "traced with values" in caplog.text
    assert d.backward.to_text() == autodiff._differentiate(tracer.graph, tracer.real, False,
                                                           shapes_alone=False).backward.to_text()

    compiled = kiln.compile(lambda x: (bind(prim, (x,), {}) * x).sum())
    x1, x2 = _t(3, 4, seed=2), _t(3, 4, seed=2)
    compiled(x1).backward()
    (bind(prim, (x2,), {}) * x2).sum().backward()
    np.testing.assert_array_equal(x1.grad.numpy(), x2.grad.numpy())


def test_an_unevaluated_array_refuses_its_values():
    data = Unevaluated((2, 3), np.float32)
    assert data.shape == (2, 3) and data.ndim == 2 and data.size == 6 and data.nbytes == 24
    assert data.strides == (12, 4)
    with pytest.raises(ValuesNeeded):
        np.asarray(data)
    with pytest.raises(ValuesNeeded):
        data.sum()
    with pytest.raises(TypeError):
        np.add(data, 1)
