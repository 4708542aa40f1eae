"""Weight gradients come out in the parameter's own (C) layout, eager and compiled, with no copy.

``linear`` multiplies by ``weight.T``, so a gradient computed as ``x^T @ g`` and transposed back
would be a strided view that autograd has to copy before it becomes ``.grad``. The matmul VJP
makes the product in the operand's own memory order instead, the compiler folds the two
transposes away, and autograd hands the product itself (or a whole C-ordered view of it) to
``.grad``. These tests fail if a copy comes back: they check that ``.grad`` shares memory with
the array the matmul kernel or the compiled backward plan produced. Values are checked against
PyTorch where it is installed and always against eager.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.functional as F
from kiln.jit import executor
from kiln.jit.api import trace_graph
from kiln.jit.backends.interpret import Plan
from kiln.jit.passes import ArithmeticElimination, DeadNodeElim
from kiln.ops.primitive import REGISTRY

RNG = np.random.default_rng(7)


def _mlp(x_shape: tuple, sizes: tuple = (12, 16, 5), dtype=kiln.float64) -> tuple:
    kiln.manual_seed(0)
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(kiln.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(kiln.nn.ReLU())
    model = kiln.nn.Sequential(*layers).to(dtype)
    x = kiln.tensor(RNG.standard_normal(x_shape), dtype=dtype)
    return model, x


class _MatmulOutputs:
    """Records every array the matmul kernel returns (eager autograd's products)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.arrays: list[np.ndarray] = []
        prim = REGISTRY["matmul"]
        kernel = prim.kernel

        def recording(xp, a, b):
            out = kernel(xp, a, b)
            self.arrays.append(out)
            return out

        monkeypatch.setattr(prim, "kernel", recording)

    def produced(self, grad: np.ndarray) -> bool:
        return any(np.shares_memory(grad, a) for a in self.arrays)


def _is_whole_c_array(a: np.ndarray) -> bool:
    """C-contiguous, and either owning its memory or a view of all of its owner's memory."""
    if not a.flags.c_contiguous:
        return False
    return a.base is None or (a.base.nbytes == a.nbytes and a.base.flags.c_contiguous)


@pytest.mark.parametrize("x_shape", [(7, 12), (3, 4, 12)])
def test_eager_linear_weight_grads_are_the_products_themselves(monkeypatch, x_shape):
    model, x = _mlp(x_shape)
    outputs = _MatmulOutputs(monkeypatch)
    (model(x) ** 2).sum().backward()
    for name, p in model.named_parameters():
        g = p.grad._data
        assert _is_whole_c_array(g), (name, g.strides)
        if name.endswith("weight"):
            assert outputs.produced(g), f"{name}.grad is a copy, not the matmul's result"


@pytest.mark.parametrize("x_shape", [(7, 12), (3, 4, 12)])
@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_compiled_weight_grads_are_the_backward_plans_outputs(monkeypatch, x_shape, backend):
    model, x = _mlp(x_shape)
    handed: list[tuple] = []
    backward = executor.TrainingEntry.backward

    def recording(self, bundle, residuals):
        out = backward(self, bundle, residuals)
        handed.append(tuple(t._data for t in out))
        return out

    monkeypatch.setattr(executor.TrainingEntry, "backward", recording)
    compiled = kiln.compile(model, backend=backend)
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        (compiled(x) ** 2).sum().backward()
    assert handed, "the compiled backward did not run"
    plan_out = handed[-1]
    for name, p in model.named_parameters():
        g = p.grad._data
        assert _is_whole_c_array(g), (name, g.strides)
        assert any(np.shares_memory(g, o) for o in plan_out), f"{name}.grad is a copy of the plan's output"
    # and the values are eager's
    want = {}
    model.zero_grad(set_to_none=True)
    (model(x) ** 2).sum().backward()
    want = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    (compiled(x) ** 2).sum().backward()
    for n, p in model.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), want[n], rtol=1e-12, atol=1e-12)


def test_backward_graph_has_no_transposed_weight_gradient():
    """The compiled backward outputs each weight gradient straight from a matmul (no permute)."""
    model, x = _mlp((6, 12))
    compiled = kiln.compile(model, backend="interpret")
    (compiled(x) ** 2).sum().backward()
    entry = compiled.cache_entries[0]
    graph = entry.backward_graph
    producers = {n.out.id: n for n in graph.nodes}
    names = [n for n, _ in model.named_parameters()]
    weights = [v for v, name in zip(graph.outputs, names) if name.endswith("weight")]
    assert weights
    for v in weights:
        assert producers[v.id].prim.name == "matmul", producers[v.id].prim.name


def test_a_gradient_that_shares_memory_with_another_is_still_copied():
    """Two leaves whose gradients are views of one array get separate memory."""
    w = kiln.tensor(RNG.standard_normal((3, 4)), requires_grad=True)
    v = kiln.tensor(RNG.standard_normal((12,)), requires_grad=True)
    c = RNG.standard_normal(12)
    ((w.reshape(12) + v) * kiln.tensor(c)).sum().backward()  # add hands one array (g * c) to both
    assert not np.shares_memory(w.grad._data, v.grad._data)
    np.testing.assert_array_equal(w.grad.numpy(), c.reshape(3, 4))
    np.testing.assert_array_equal(v.grad.numpy(), c)
    w.grad.add_(1.0)
    np.testing.assert_array_equal(v.grad.numpy(), c)


def test_a_view_of_the_callers_gradient_is_copied():
    w = kiln.tensor(RNG.standard_normal((3, 4)), requires_grad=True)
    seed = kiln.tensor(RNG.standard_normal((12,)))
    w.reshape(12).backward(seed)
    assert not np.shares_memory(w.grad._data, seed._data)
    np.testing.assert_array_equal(w.grad.numpy(), seed.numpy().reshape(3, 4))
    w.grad.add_(1.0)  # the caller's gradient is untouched
    assert not np.array_equal(seed.numpy().reshape(3, 4), w.grad.numpy())


# ---- values against PyTorch -------------------------------------------------------------------
torch = pytest.importorskip("torch")


def _torch_grads(fn, *arrays):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    fn(*ts).backward()
    return [t.grad.numpy() for t in ts]


def _kiln_grads(fn, *arrays, compiled=False):
    ts = [kiln.tensor(a, requires_grad=True) for a in arrays]
    run = kiln.compile(fn) if compiled else fn
    run(*ts).backward()
    return [t.grad.numpy() for t in ts]


CASES = {
    # linear on a 3-D input: one flattened product for the weight gradient
    "linear 3d": ((lambda F_, x, w, b: (F_.linear(x, w, b) ** 2).sum()), [(2, 5, 6), (4, 6), (4,)]),
    # x @ w with a plain (C-ordered) weight shared by a batch
    "x @ w batched": ((lambda F_, x, w, b: ((x @ w + b) ** 2).sum()), [(3, 5, 6), (6, 4), (4,)]),
    # a transposed left operand (columns contiguous): its gradient is made transposed too
    "x.T @ w": ((lambda F_, x, w, b: ((x.transpose(-1, -2) @ w + b) ** 2).sum()), [(6, 5), (6, 4), (4,)]),
    # attention-like: batched q @ k^T
    "q @ k^T": ((lambda F_, x, w, b: ((x @ w.transpose(-1, -2)) ** 2).sum() + b.sum()),
                [(2, 3, 5, 4), (2, 3, 7, 4), (1,)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("compiled", [False, True])
def test_matmul_gradients_match_pytorch(case, compiled):
    fn, shapes = CASES[case]
    arrays = [RNG.standard_normal(s) for s in shapes]
    want = _torch_grads(lambda *t: fn(torch.nn.functional, *t), *arrays)
    got = _kiln_grads(lambda *t: fn(F, *t), *arrays, compiled=compiled)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


def test_mlp_on_3d_input_matches_pytorch_in_float32():
    model, x = _mlp((4, 3, 12), dtype=kiln.float32)
    tmodel = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))
    tmodel.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in model.state_dict().items()})
    compiled = kiln.compile(model)
    for run in (model, compiled):
        model.zero_grad(set_to_none=True)
        out = run(x)
        (out ** 2).mean().backward()
        tmodel.zero_grad(set_to_none=True)
        tout = tmodel(torch.from_numpy(x.numpy()))
        (tout ** 2).mean().backward()
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
        for (name, p), tp in zip(model.named_parameters(), tmodel.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


# ---- the pass that folds the two transposes ---------------------------------------------------
def test_permute_of_permute_composes_and_folds_to_identity():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    fn = lambda t: (t.permute(2, 0, 1).permute(0, 2, 1) * 2, t.permute(1, 2, 0).permute(2, 0, 1) + 1)  # noqa: E731
    graph = trace_graph(fn, kiln.tensor(x))
    out = DeadNodeElim()(ArithmeticElimination()(graph))
    ops = [n.prim.name for n in out.nodes]
    assert ops.count("permute") == 1, ops  # the first pair composes, the second is the identity
    perm = next(n.params["perm"] for n in out.nodes if n.prim.name == "permute")
    assert perm == (2, 1, 0)
    got = Plan(out).run([x if spec.kind == "arg" else spec.literal for spec in out.specs])[0]
    np.testing.assert_array_equal(got[0], x.transpose(2, 1, 0) * 2)
    np.testing.assert_array_equal(got[1], x + 1)
