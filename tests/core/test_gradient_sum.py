"""Gradients of a tensor read through several slices (kiln/gradient_sum.py).

Slices that tile one dim (unbind, split, chunk, x[t] for every t) are summed as one cat of
their gradients; anything else (gaps, overlaps, several dims, whole-tensor uses) is scattered
and added as before. The oracle is NumPy by hand (each slice's gradient scattered into zeros
and summed) and PyTorch where it is installed; compiled gradients must equal eager bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.gradient_sum import SliceOfDim, slice_of_dim
from kiln.ops.primitive import REGISTRY

rng = np.random.default_rng(0)


def _grad(fn, x_np):
    x = kiln.tensor(x_np, requires_grad=True)
    fn(x).backward()
    return x.grad.numpy()


@pytest.fixture
def index_grad_calls(monkeypatch):
    """How many times the scatter-into-zeros kernel (index_grad) runs."""
    prim = REGISTRY["index_grad"]
    calls = []
    kernel = prim.kernel

    def counted(*args, **kwargs):
        calls.append(1)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(prim, "kernel", counted)
    return calls


def test_slice_of_dim_reads_basic_specs():
    full = ("s", None, None, None)
    assert slice_of_dim((("i", -1), full), (5, 3)) == SliceOfDim(0, 4, 5, True)
    assert slice_of_dim((full, ("s", 1, 3, 1)), (5, 3)) == SliceOfDim(1, 1, 3, False)
    assert slice_of_dim((full, ("s", 0, None, None)), (5, 3)) is None  # the whole tensor: no slice
    assert slice_of_dim((("s", 0, 4, 2),), (5, 3)) is None  # a step
    assert slice_of_dim((("i", 0), ("i", 1)), (5, 3)) is None  # two dims
    assert slice_of_dim((("t",),), (5, 3)) is None  # a tensor index
    assert slice_of_dim((("n",), ("i", 0)), (5, 3)) is None  # a new axis


def test_unbind_gradient_is_one_cat_and_matches_numpy(index_grad_calls):
    x_np = rng.standard_normal((6, 3, 4)).astype(np.float32)
    w = rng.standard_normal((6, 3, 4)).astype(np.float32)

    def fn(x):
        return sum((row * kiln.tensor(w[t])).sum() for t, row in enumerate(kiln.unbind(x, 0)))

    np.testing.assert_array_equal(_grad(fn, x_np), w)
    assert not index_grad_calls  # no per-slice scatter into a zero tensor of the whole shape


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_chunk_and_split_gradients(dim, index_grad_calls):
    x_np = rng.standard_normal((4, 6, 8)).astype(np.float32)
    scale = [1.0, -2.0, 0.5, 3.0]

    def fn(x):
        parts = kiln.chunk(x, 4, dim) if dim != 1 else kiln.split(x, [1, 2, 3], dim)
        return sum((p * s).sum() for p, s in zip(parts, scale))

    want = np.zeros_like(x_np)
    bounds = np.cumsum([0, 1, 2, 3]) if dim == 1 else np.arange(0, x_np.shape[dim] + 1, x_np.shape[dim] // 4)
    for k in range(len(bounds) - 1):
        where = [slice(None)] * 3
        where[dim] = slice(int(bounds[k]), int(bounds[k + 1]))
        want[tuple(where)] = scale[k]
    np.testing.assert_array_equal(_grad(fn, x_np), want)
    assert not index_grad_calls


@pytest.mark.parametrize("case", ["gap", "overlap", "two dims", "with whole use", "one slice"])
def test_slices_that_do_not_tile_are_scattered_and_added(case):
    x_np = rng.standard_normal((5, 4)).astype(np.float32)
    reads = {"gap": [(slice(0, 2),), (slice(3, 5),)],
             "overlap": [(slice(0, 3),), (slice(2, 5),), (4,)],
             "two dims": [(0,), (slice(None), 1), (slice(1, 5),)],
             "with whole use": [(slice(0, 2),), (slice(2, 5),), ()],
             "one slice": [(slice(1, 4),)]}[case]
    weights = [rng.standard_normal(x_np[r].shape).astype(np.float32) for r in reads]

    def fn(x):
        return sum((x[r] * kiln.tensor(w)).sum() for r, w in zip(reads, weights))

    want = np.zeros_like(x_np)
    for r, w in zip(reads, weights):
        want[r] += w
    np.testing.assert_allclose(_grad(fn, x_np), want, rtol=1e-6, atol=1e-6)


def test_a_tiled_leaf_and_a_tiled_intermediate_match_torch():
    torch = pytest.importorskip("torch")
    x_np = rng.standard_normal((5, 6)).astype(np.float32)

    def body(lib, x):
        y = x * 2.0  # an intermediate read through slices, and the leaf x too
        rows = lib.unbind(y, 0)
        cols = lib.chunk(x, 3, 1)
        return sum((r * (k + 1)).sum() for k, r in enumerate(rows)) + sum((c ** 2).sum() for c in cols)

    xk = kiln.tensor(x_np, requires_grad=True)
    body(kiln, xk).backward()
    xt = torch.tensor(x_np, requires_grad=True)
    body(torch, xt).backward()
    np.testing.assert_allclose(xk.grad.numpy(), xt.grad.numpy(), rtol=1e-6)


def test_tiled_slices_second_order_gradient():
    x_np = rng.standard_normal((3, 4)).astype(np.float32)
    x = kiln.tensor(x_np, requires_grad=True)
    loss = sum((row ** 3).sum() for row in kiln.unbind(x, 0))
    (g,) = kiln.autograd.grad(loss, x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 3 * x_np ** 2, rtol=1e-6)
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * x_np, rtol=1e-5)


def _rnn_like(x, w, u):
    """A recurrence read through unbind and chunk, in ops compiled code computes with eager's bits
    (no transcendentals, whose vectorized C is within 4 ulp of NumPy: tests/tolerances.py)."""
    h = kiln.zeros(x.shape[1], u.shape[0])
    outs = []
    for xt in kiln.unbind(x, 0):
        a, b = kiln.chunk(xt @ w + h @ u, 2, -1)
        h = kiln.relu(a) * b
        h = kiln.cat([h, h * 0.5], -1)
        outs.append(h)
    return kiln.stack(outs, 0).sum()


def test_compiled_slice_gradients_equal_eager_bit_for_bit():
    x_np = rng.standard_normal((7, 3, 4)).astype(np.float32)
    w_np = rng.standard_normal((4, 8)).astype(np.float32) * 0.5
    u_np = rng.standard_normal((8, 8)).astype(np.float32) * 0.5
    compiled = kiln.compile(_rnn_like)
    grads = []
    for fn in (_rnn_like, compiled, compiled):  # eager, the compiled call that traces, a replay
        x, w, u = (kiln.tensor(a, requires_grad=True) for a in (x_np, w_np, u_np))
        fn(x, w, u).backward()
        grads.append([t.grad.numpy().copy() for t in (x, w, u)])
    for run in grads[1:]:
        for eager, compiled in zip(grads[0], run):
            np.testing.assert_array_equal(compiled, eager)


@pytest.mark.parametrize("backend", ["interpret", "auto"])
def test_lstm_whole_step_gradients_equal_eager(backend):
    kiln.manual_seed(0)
    lstm = kiln.nn.LSTM(4, 6, num_layers=2)
    x = kiln.randn(5, 3, 4)

    def step(x):
        lstm.zero_grad()
        out, (h, c) = lstm(x)
        loss = out.sum() + c.sum()
        loss.backward()
        return loss

    step(x)
    want = [p.grad.numpy().copy() for p in lstm.parameters()]
    compiled = kiln.compile(step, backend=backend)
    for _ in range(3):
        compiled(x)
        for p, w in zip(lstm.parameters(), want):
            if backend == "interpret":
                np.testing.assert_array_equal(p.grad.numpy(), w)
            else:  # native sigmoid and tanh: within 4 ulp of NumPy's, so a few ulp through the steps
                np.testing.assert_allclose(p.grad.numpy(), w, rtol=1e-5, atol=1e-6)


def test_slices_of_a_dynamic_dim_stay_correct_at_other_sizes():
    def fn(x):
        return (x[0:2] * 2.0).sum() + (x[2:] * 3.0).sum()

    f = kiln.compile(fn, dynamic_dims={0: {0: "B"}})
    for batch in (4, 6, 9):
        x_np = rng.standard_normal((batch, 3)).astype(np.float32)
        x = kiln.tensor(x_np, requires_grad=True)
        f(x).backward()
        want = np.full_like(x_np, 3.0)
        want[:2] = 2.0
        np.testing.assert_array_equal(x.grad.numpy(), want)


@pytest.fixture
def matmul_calls(monkeypatch):
    """The shapes of the operands of every matmul kernel call."""
    prim = REGISTRY["matmul"]
    calls = []
    kernel = prim.kernel

    def counted(xp, a, b):
        calls.append((a.shape, b.shape))
        return kernel(xp, a, b)

    monkeypatch.setattr(prim, "kernel", counted)
    return calls


@pytest.mark.parametrize("transposed", [False, True])
def test_a_weight_applied_every_step_gets_one_gathered_product(transposed, matmul_calls):
    steps, batch = 9, 5
    xs = [rng.standard_normal((batch, 6)).astype(np.float32) for _ in range(steps)]
    gs = [rng.standard_normal((batch, 4)).astype(np.float32) for _ in range(steps)]
    w_np = rng.standard_normal((4, 6) if transposed else (6, 4)).astype(np.float32)
    w = kiln.tensor(w_np, requires_grad=True)
    weight = w.T if transposed else w  # as linear and the LSTM apply theirs
    loss = sum(((kiln.tensor(x) @ weight) * kiln.tensor(g)).sum() for x, g in zip(xs, gs))
    matmul_calls.clear()
    loss.backward()
    want = sum(x.T @ g for x, g in zip(xs, gs))  # d/dW of sum_t <x_t W, g_t>
    np.testing.assert_allclose(w.grad.numpy(), want.T if transposed else want, rtol=1e-5, atol=1e-5)
    assert len(matmul_calls) == 1 and (steps * batch) in matmul_calls[0][0] + matmul_calls[0][1]


def test_products_of_many_rows_are_not_gathered(matmul_calls):
    x = kiln.tensor(rng.standard_normal((100, 6)).astype(np.float32))
    w = kiln.tensor(rng.standard_normal((6, 4)).astype(np.float32), requires_grad=True)
    loss = (x @ w).sum() + (x @ w).pow(2).sum()
    matmul_calls.clear()
    loss.backward()
    assert len(matmul_calls) == 2  # one product per use: 100-row products gain nothing from joining
    want = x.numpy().T @ (1 + 2 * (x.numpy() @ w.detach().numpy()))
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-5, atol=1e-4)


def test_gathered_products_match_torch_in_an_rnn_loop():
    torch = pytest.importorskip("torch")
    x_np = rng.standard_normal((8, 4, 5)).astype(np.float32)
    w_np = rng.standard_normal((5, 7)).astype(np.float32) * 0.4
    u_np = rng.standard_normal((7, 7)).astype(np.float32) * 0.4

    def body(lib, x, w, u):
        h = lib.zeros(4, 7)
        for t in range(x.shape[0]):
            h = lib.tanh(x[t] @ w + h @ u.T)
        return h.sum()

    grads = []
    for lib in (kiln, torch):
        ts = [lib.tensor(a, requires_grad=True) for a in (x_np, w_np, u_np)]
        body(lib, *ts).backward()
        grads.append([t.grad.numpy() if lib is kiln else t.grad.detach().numpy() for t in ts])
    for k, t in zip(*grads):
        np.testing.assert_allclose(k, t, rtol=1e-5, atol=1e-6)
