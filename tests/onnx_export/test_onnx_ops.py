"""Each primitive's ONNX mapping, checked against kiln's own result in onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="pip install kiln[onnx] to run the ONNX export tests")
pytest.importorskip("onnxruntime", reason="pip install kiln[onnx] to run the ONNX export tests")

import kiln  # noqa: E402
import kiln.nn.functional as F  # noqa: E402
from kiln.jit.api import trace_graph  # noqa: E402
from onnx_helpers import assert_export_matches  # noqa: E402


def _x(*shape, seed=0):
    return kiln.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _pos(*shape, seed=0):
    return kiln.from_numpy(np.random.default_rng(seed).uniform(0.1, 2.0, shape).astype(np.float32))


def _ints(*shape, low=-5, high=5, seed=0):
    return kiln.from_numpy(np.random.default_rng(seed).integers(low, high, shape).astype(np.int64))


ELEMENTWISE = {
    "neg_exp": lambda x: (-x).exp(),
    "log_sqrt": lambda x: x.abs().add(0.5).log() + x.abs().sqrt(),
    "log1p": lambda x: kiln.log1p(x.abs()),
    "trig": lambda x: x.sin() * x.cos(),
    "tanh_sigmoid_relu": lambda x: x.tanh() + x.sigmoid() + x.relu(),
    "erf_gelu": lambda x: F.gelu(x) + kiln.erf(x),
    "abs_sign": lambda x: x.abs() * x.sign(),
    "rounding": lambda x: kiln.floor(x * 3) + kiln.ceil(x * 3) + kiln.round(x * 3),
    "arith": lambda x: (x + 1.5) * 2.0 / (x * x + 1.0) - 0.25,
    "pow": lambda x: x.abs() ** 1.5 + 2.0 ** x,
    "max_min": lambda x: kiln.maximum(x, x * 0.5) + kiln.minimum(x, -x) + x.clamp(-0.5, 0.5),
    "compare_where": lambda x: kiln.where((x > 0) & (x <= 1.0) | (x == 0), x, -x) + (x != 0.3).float()
    + (x >= -0.2).float() + (x < 0.1).float(),
    "logical_not": lambda x: kiln.where(~(x > 0), x, 0.0),
    "cast": lambda x: (x * 10).long().float() + (x > 0).int().float(),
    "float_floor_divide": lambda x: kiln.floor_divide(x * 10, 3.0),
    "softmax": lambda x: kiln.softmax(x, -1),
    "log_softmax": lambda x: F.log_softmax(x, dim=1),
    "layer_norm": lambda x: F.layer_norm(x, (5,)),
    "mean_var": lambda x: x.mean(0, keepdim=True) + x.var(1, keepdim=True),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_and_composites(name):
    assert_export_matches(ELEMENTWISE[name], _x(4, 5))


def test_integer_ops():
    def f(a, b):
        return kiln.floor_divide(a, b), a % b, a * b - a, kiln.maximum(a, b)

    assert_export_matches(f, _ints(3, 4, seed=1), _ints(3, 4, low=1, high=4, seed=2) * -1 + 0)


def test_integer_floor_divide_with_negative_operands():
    a = kiln.tensor([7, -7, 7, -7, 0, 6])
    b = kiln.tensor([2, 2, -2, -2, 3, -3])
    assert_export_matches(kiln.floor_divide, a, b)


# ---- reductions -------------------------------------------------------------------------
REDUCTIONS = {
    "sum_all": lambda x: x.sum(),
    "sum_all_scaled": lambda x: x.sum() * 2.0 + 1.0,
    "sum_axes": lambda x: x.sum((0, 2)),
    "sum_keepdim": lambda x: x.sum(1, keepdim=True),
    "amax": lambda x: x.amax((1, 2)),
    "max_keepdim": lambda x: x.amax(0, keepdim=True),
    "max_dim_values_indices": lambda x: x.max(1),
    "prod": lambda x: x.prod(2),
    "argmax": lambda x: x.argmax(1),
    "argmax_keepdim": lambda x: x.argmax(-1, keepdim=True),
    "argmax_flat": lambda x: x.argmax(),
    "count_bools": lambda x: (x > 0).sum(1),
    "cumsum": lambda x: x.cumsum(1),
    "logsumexp": lambda x: kiln.logsumexp(x, 2),
}


@pytest.mark.parametrize("opset", [13, 17, 18])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_at_each_opset_rule(name, opset):
    assert_export_matches(REDUCTIONS[name], _x(3, 4, 5), opset=opset)


# ---- movement ---------------------------------------------------------------------------
MOVEMENT = {
    "reshape_permute": lambda x: x.reshape(4, 15).t().reshape(3, 2, 10).permute(2, 0, 1),
    "expand": lambda x: x[:, :1].expand(3, 7, 5),
    "flip": lambda x: x.flip((0, 2)),
    "concat": lambda x: kiln.cat([x, x * 2, x[:, :1]], dim=1),
    "stack": lambda x: kiln.stack([x, -x], 0),
    "pad": lambda x: F.pad(x, (1, 2, 0, 1), value=-1.5),
    "tril": lambda x: kiln.tril(x[0]),
    "flatten_unsqueeze": lambda x: x.flatten(1).unsqueeze(0).squeeze(0),
    "split_chunks": lambda x: sum(x.split(2, dim=1)[i].sum() for i in range(2)),
}


@pytest.mark.parametrize("name", sorted(MOVEMENT))
def test_movement(name):
    assert_export_matches(MOVEMENT[name], _x(3, 4, 5))


INDEXING = {
    "slices": lambda x: x[1:, ::2, -3:],
    "negative_step": lambda x: x[::-1, 3:0:-2],
    "integers": lambda x: x[1, :, -1],
    "last_integer": lambda x: x[-1],
    "none_and_ellipsis": lambda x: x[None, ..., None, 2],
    "ellipsis_only": lambda x: x[...],
    "clamped_slice": lambda x: x[:, 2:100],
}


@pytest.mark.parametrize("name", sorted(INDEXING))
def test_basic_indexing(name):
    assert_export_matches(INDEXING[name], _x(3, 4, 5))


def test_integer_tensor_index_becomes_gather():
    def f(x, idx):
        return x[:, idx], x[idx], x[None, :, idx]

    assert_export_matches(f, _x(4, 5, 6), _ints(2, 3, low=-4, high=4))


def test_integer_next_to_tensor_index():
    assert_export_matches(lambda x, idx: x[1, idx], _x(3, 5, 2), _ints(4, low=0, high=5))


def test_embedding_and_take_along_dim():
    emb = kiln.nn.Embedding(10, 4)

    def f(tokens, x, idx):
        return emb(tokens), kiln.gather(x, 1, idx), kiln.take_along_dim(x, idx, 1)

    assert_export_matches(f, _ints(2, 3, low=0, high=10), _x(3, 4), _ints(3, 2, low=0, high=4))


def test_scatter_add():
    def f(base, idx, src):
        return base.scatter_add(1, idx, src)

    assert_export_matches(f, _x(3, 4), _ints(3, 2, low=0, high=4), _x(3, 2, seed=1))


# ---- creation ---------------------------------------------------------------------------
def test_full_and_arange():
    def f(x):
        return x + kiln.full((3, 4), 2.5) + kiln.arange(4, dtype=kiln.float32), kiln.arange(1, 10, 3), \
            kiln.ones(2, 2, dtype=kiln.bool)

    assert_export_matches(f, _x(3, 4))


# ---- matmul and einsum ------------------------------------------------------------------
def test_matmul_and_einsum():
    def f(a, b):
        return a @ b, kiln.einsum("bij,bkj->bik", a, b.transpose(1, 2)), (a[0] @ b[0][:, 0])

    assert_export_matches(f, _x(2, 3, 4), _x(2, 4, 5, seed=1))


# ---- windows: conv and pooling ----------------------------------------------------------
CONVS = {
    "plain": dict(),
    "stride_padding": dict(stride=2, padding=1),
    "dilation": dict(dilation=2, padding=2),
    "same": dict(padding="same"),
    "groups": dict(groups=2),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_conv2d_becomes_conv(name):
    kw = CONVS[name]
    groups = kw.get("groups", 1)
    conv = kiln.nn.Conv2d(4, 6, 3, **kw)
    exported = assert_export_matches(conv, _x(2, 4, 9, 9))
    assert [n.op_type for n in exported.graph.node].count("Conv") == 1
    conv_node = next(n for n in exported.graph.node if n.op_type == "Conv")
    assert {a.name: a for a in conv_node.attribute}["group"].i == groups


def test_conv1d():
    assert_export_matches(kiln.nn.Conv1d(3, 4, 3, padding=1), _x(2, 3, 10))


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=1, dilation=2)])
def test_max_pool_becomes_max_pool(kw):
    exported = assert_export_matches(lambda x: F.max_pool2d(x, **kw), _x(2, 3, 9, 9))
    assert [n.op_type for n in exported.graph.node] == ["MaxPool", "Identity"]


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, padding=1, count_include_pad=False)])
def test_avg_pool_through_generic_unfold(kw):
    assert_export_matches(lambda x: F.avg_pool2d(x, **kw), _x(2, 3, 8, 8))


def test_generic_unfold_keeps_minus_inf_padding_and_infinities():
    """unfold2d followed by something other than max: the Gather im2col, exact with -inf padding."""
    def f(x):
        cols = F.unfold2d(x, (3, 3), (2, 2), (1, 1), (1, 1), float("-inf"))
        return cols.amax((2, 3)) + cols.amax((2, 3)), cols[:, :, 0, 0]

    x = _x(1, 2, 5, 5)
    x.numpy()[0, 0, 0, 0] = np.inf
    assert_export_matches(f, x)


def test_conv_weights_shared_with_other_users_still_export():
    conv = kiln.nn.Conv2d(1, 2, 3)

    def f(x):
        return conv(x), conv.weight.sum()

    assert_export_matches(f, _x(1, 1, 6, 6))


def test_batch_norm_eval_and_adaptive_pool():
    model = kiln.nn.Sequential(kiln.nn.Conv2d(3, 4, 3, padding=1), kiln.nn.BatchNorm2d(4), kiln.nn.ReLU(),
                               kiln.nn.AdaptiveAvgPool2d(1), kiln.nn.Flatten(), kiln.nn.Linear(4, 2))
    model(_x(4, 3, 6, 6))  # move the running stats away from their initial values
    assert_export_matches(model.eval(), _x(2, 3, 6, 6))


def test_every_primitive_in_the_table_is_a_kiln_primitive():
    from kiln.ops.primitive import REGISTRY

    assert set(kiln.onnx.SUPPORTED_OPS) <= set(REGISTRY)
    assert {"add", "matmul", "unfold2d", "index", "sum", "max", "argmax", "einsum"} <= set(kiln.onnx.SUPPORTED_OPS)


def test_traced_graphs_use_the_ops_this_file_covers():
    g = trace_graph(lambda x: kiln.softmax(x, -1), _x(2, 3))
    assert {n.prim.name for n in g.nodes} <= set(kiln.onnx.SUPPORTED_OPS)
