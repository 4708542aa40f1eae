"""sort, argsort and topk: PyTorch parity on ties, NaN, dtypes and dims; gradients; compiled == eager.

The plain values/indices/gradient parity on random inputs is in op_cases.py (run by
test_ops_parity.py and the finite-difference checks); this file covers what random
inputs never hit.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")

NAN, INF = float("nan"), float("inf")
SPECIAL = [[3.0, NAN, -INF, 1.0, 1.0, INF, -0.0, 0.0, NAN, -2.0, 1.0]]


def _both(values, dtype="float32"):
    array = np.array(values, dtype=dtype)
    return kiln.tensor(array), torch.tensor(array)


def _same(k, t):
    np.testing.assert_array_equal(k.detach().numpy(), t.detach().numpy())
    assert k.dtype.name == str(t.dtype).replace("torch.", "")


@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_with_ties_nan_and_infinities_matches_pytorch(descending):
    k, t = _both(SPECIAL)
    kv, ki = kiln.sort(k, descending=descending, stable=True)
    tv, ti = torch.sort(t, descending=descending, stable=True)
    _same(kv, tv)
    _same(ki, ti)
    _same(kiln.argsort(k, descending=descending, stable=True), torch.argsort(t, descending=descending, stable=True))


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool", "float64"])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_other_dtypes_matches_pytorch(dtype, descending):
    rng = np.random.default_rng(0)
    array = rng.integers(0, 3, (4, 7)).astype(dtype)
    k, t = kiln.tensor(array), torch.tensor(array)
    for dim in (0, 1, -1):
        kv, ki = k.sort(dim=dim, descending=descending, stable=True)
        tv, ti = t.sort(dim=dim, descending=descending, stable=True)
        _same(kv, tv)
        _same(ki, ti)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_with_nan_and_infinities_matches_pytorch(largest):
    k, t = _both([[3.0, NAN, -INF, 1.5, INF, -0.5, 2.0]])
    for n in range(0, 8):
        kv, ki = kiln.topk(k, n, largest=largest)
        tv, ti = torch.topk(t, n, largest=largest)
        _same(kv, tv)
        _same(ki, ti)


@pytest.mark.parametrize("largest", [True, False])
def test_partitioned_topk_equals_a_full_sort(largest):
    rng = np.random.default_rng(1)
    array = rng.standard_normal((5, 200)).astype(np.float32)
    array[0, ::7] = np.nan
    array[1, ::5] = np.inf
    x = kiln.tensor(array)
    values, indices = kiln.topk(x, 6, dim=1, largest=largest)  # 6 * 8 <= 200: the partition path
    full_values, full_indices = kiln.sort(x, dim=1, descending=largest)
    np.testing.assert_array_equal(values.numpy(), full_values.numpy()[:, :6])
    np.testing.assert_array_equal(indices.numpy(), full_indices.numpy()[:, :6])
    tv, ti = torch.topk(torch.tensor(array), 6, dim=1, largest=largest)
    np.testing.assert_array_equal(values.numpy(), tv.numpy())


@pytest.mark.parametrize("dtype", ["int64", "float32", "bool"])
def test_partitioned_topk_equals_a_stable_sort_on_heavy_ties(dtype):
    rng = np.random.default_rng(4)
    for trial in range(20):
        array = rng.integers(0, 4, (3, 64)).astype(dtype)
        if dtype == "float32":
            array[rng.random(array.shape) < 0.2] = np.nan
        x = kiln.tensor(array)
        for largest in (True, False):
            k = int(rng.integers(1, 9))  # k * 8 <= 64: the partition path
            full = kiln.sort(x, dim=1, descending=largest).indices.numpy()[:, :k]
            np.testing.assert_array_equal(kiln.topk(x, k, dim=1, largest=largest).indices.numpy(), full,
                                          err_msg=f"trial {trial}, k={k}, largest={largest}")


def test_topk_ties_come_in_index_order_and_the_lowest_indices_win():
    x = kiln.tensor([0.0] * 20 + [5.0, 1.0, 5.0, 5.0] + [0.0] * 20)
    values, indices = kiln.topk(x, 3)  # the partition path: 3 * 8 <= 44
    assert values.tolist() == [5.0, 5.0, 5.0] and indices.tolist() == [20, 22, 23]
    assert kiln.topk(x, 2).indices.tolist() == [20, 22]
    assert kiln.topk(x, 6, largest=False).indices.tolist() == [0, 1, 2, 3, 4, 5]
    ints = kiln.tensor([[3, 1, 3, 2, 3] * 10])
    assert kiln.topk(ints, 4, dim=1).indices.tolist() == [[0, 2, 4, 5]]
    assert kiln.topk(ints, 5, dim=1, largest=False).indices.tolist() == [[1, 6, 11, 16, 21]]


def test_sort_gradient_goes_to_each_element_once_even_with_ties():
    data = np.array([[2.0, 1.0, 2.0, 0.5], [1.0, 1.0, 1.0, 1.0]], np.float32)
    upstream = np.arange(8, dtype=np.float32).reshape(2, 4)
    k = kiln.tensor(data, requires_grad=True)
    t = torch.tensor(data, requires_grad=True)
    kiln.sort(k, dim=1, descending=True, stable=True).values.backward(kiln.tensor(upstream))
    torch.sort(t, dim=1, descending=True, stable=True).values.backward(torch.tensor(upstream))
    np.testing.assert_array_equal(k.grad.numpy(), t.grad.numpy())
    k.grad = None
    kiln.topk(k, 2, dim=1).values.sum().backward()  # (which of PyTorch's tied elements win is unspecified)
    np.testing.assert_array_equal(k.grad.numpy(), [[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])


def test_zero_dim_and_empty_tensors():
    x = kiln.tensor(3.5, requires_grad=True)
    values, indices = kiln.sort(x)
    assert values.item() == 3.5 and indices.item() == 0 and indices.dtype == kiln.int64
    values.backward()
    assert x.grad.item() == 1.0
    assert kiln.topk(kiln.tensor(2.0), 1).indices.item() == 0
    empty = kiln.zeros(0, 3)
    assert kiln.sort(empty, dim=0).values.shape == (0, 3)
    assert kiln.topk(empty, 0, dim=0).values.shape == (0, 3)
    assert kiln.argsort(kiln.zeros(2, 0)).shape == (2, 0)


def _sampling_step(logits):
    values, indices = kiln.topk(logits, 3, dim=-1)
    masked = kiln.where(logits < values[..., -1:], -float("inf"), logits)
    probs = kiln.nn.functional.softmax(masked, dim=-1)
    ranked, order = probs.sort(dim=-1, descending=True)
    return (ranked * kiln.arange(5.0)).sum() + values.sum(), order, kiln.argsort(logits, dim=0)


@pytest.mark.parametrize("fullgraph", [False, True])
def test_compiled_matches_eager_values_indices_and_grads(fullgraph):
    rng = np.random.default_rng(2)
    data = [rng.standard_normal((4, 5)).astype(np.float32) for _ in range(3)]
    compiled = kiln.compile(_sampling_step, fullgraph=fullgraph)
    for array in data:
        x_eager = kiln.tensor(array, requires_grad=True)
        x_comp = kiln.tensor(array, requires_grad=True)
        e_loss, e_order, e_arg = _sampling_step(x_eager)
        c_loss, c_order, c_arg = compiled(x_comp)
        e_loss.backward()
        c_loss.backward()
        np.testing.assert_allclose(c_loss.item(), e_loss.item(), rtol=1e-6)
        np.testing.assert_array_equal(c_order.numpy(), e_order.numpy())
        np.testing.assert_array_equal(c_arg.numpy(), e_arg.numpy())
        np.testing.assert_allclose(x_comp.grad.numpy(), x_eager.grad.numpy(), rtol=1e-6, atol=1e-7)
    assert compiled.stats.fallbacks == 0 and compiled.stats.misses == 1 and compiled.stats.hits == 2


def test_compiled_graph_holds_the_primitives():
    text = kiln.xpr(lambda x: (kiln.topk(x, 2).values, kiln.argsort(x)), kiln.randn(3, 4))
    assert "topk" in text and "argsort" in text and "gather" in text


@pytest.mark.parametrize("call, error, match", [
    (lambda: kiln.topk(kiln.randn(3), 4), ValueError, r"k=4 is out of range: expected 0 <= k <= 3"),
    (lambda: kiln.topk(kiln.randn(3), -1), ValueError, "out of range"),
    (lambda: kiln.topk(kiln.randn(3), 1.5), TypeError, "k"),
    (lambda: kiln.sort(kiln.randn(3), dim=1), IndexError, "dimension 1 is out of range"),
    (lambda: kiln.argsort(kiln.randn(3), dim=None), TypeError, "dim must be an int"),
])
def test_bad_arguments_raise_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()
