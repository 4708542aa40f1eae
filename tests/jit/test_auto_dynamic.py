"""Automatic dynamic dims: a dim that changes size between calls becomes symbolic, once.

The oracle is eager execution on the same inputs, bit for bit (outputs, grads, parameter
updates); the counts are the compiled function's traces and cache hits.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.nn import functional as F
from kiln.jit.backends.cpu.codegen import FusedElementwise
from kiln.jit.backends.cpu.rowcode import RowKernel
from kiln.models import mlp
from kiln.models.gpt import gpt

from jit_helpers import assert_bitwise


def _mlp_forward():
    kiln.manual_seed(0)
    return mlp(12, (16,), 5)


def test_a_growing_sequence_traces_twice_over_64_lengths():
    kiln.manual_seed(0)
    model = gpt(vocab=40, n_layer=1, n_head=2, d_model=16, block_size=80).eval()
    compiled = kiln.compile(model, backend="interpret")  # the interpreter: the same bits as eager
    rng = np.random.default_rng(0)
    with kiln.no_grad():
        for length in range(8, 8 + 64):
            idx = kiln.tensor(rng.integers(0, 40, (2, length)))
            assert_bitwise(compiled(idx).numpy(), model(idx).numpy(), f"length {length}")
    assert compiled.stats.traces == 2
    assert compiled.stats.hits == 62
    assert compiled.stats.cache_size == 2
    assert "dim 1 of argument 0 is now the symbolic size s0, because its size changed (8 -> 9)" in \
        compiled.explain()


def test_generation_loop_with_the_native_backend_equals_eager():
    kiln.manual_seed(0)
    model = _mlp_forward()
    compiled = kiln.compile(model)  # the native CPU backend: static plan, then a symbolic Python replay
    with kiln.no_grad():
        for batch in (4, 5, 6, 7, 4, 9):
            x = kiln.randn(batch, 12)
            assert_bitwise(compiled(x).numpy(), model(x).numpy(), f"batch {batch}")
    assert compiled.stats.traces == 2


def test_plans_compiled_for_exact_sizes_keep_serving_them():
    """A full batch keeps its static (native) plan after a short last batch made the dim dynamic."""
    model = _mlp_forward()
    compiled = kiln.compile(model)
    with kiln.no_grad():
        compiled(kiln.randn(8, 12))
        compiled(kiln.randn(5, 12))  # the dim becomes dynamic: a second, symbolic plan
        static, symbolic = compiled.cache_entries
        for batch in (8, 5, 8, 3):
            x = kiln.randn(batch, 12)
            assert_bitwise(compiled(x).numpy(), model(x).numpy(), f"batch {batch}")
    assert compiled.stats.traces == 2
    assert "B" not in static.graph.to_text() and "s0" in symbolic.graph.to_text()


def test_size_one_stays_specialized_because_it_broadcasts():
    def scale_rows(x, w):
        return x * w  # w of shape (n, 1) broadcasts over x's columns; at n == 1 also over x's rows

    compiled = kiln.compile(scale_rows)
    x = kiln.randn(3, 4)
    with kiln.no_grad():
        for n in (3, 2, 1, 5):
            x, w = kiln.randn(n, 4), kiln.randn(n, 1)
            assert_bitwise(compiled(x, w).numpy(), scale_rows(x, w).numpy(), f"n {n}")
        one = kiln.randn(3, 4), kiln.randn(1, 1)  # w broadcasts over x's rows: a plan of its own
        assert_bitwise(compiled(*one).numpy(), scale_rows(*one).numpy(), "broadcast w")
    assert compiled.stats.traces == 4  # 3, then symbolic (2, 5), then 1 (static), then the (1, 1) w


def test_dynamic_false_compiles_a_plan_per_size():
    compiled = kiln.compile(lambda x: (x * 2.0).sum(0), dynamic=False, max_cache_entries=16)
    with kiln.no_grad():
        for n in range(2, 8):
            compiled(kiln.randn(n, 3))
    assert compiled.stats.traces == 6 and compiled.dynamic is False


def test_dynamic_true_makes_every_dim_symbolic_from_the_first_call():
    compiled = kiln.compile(lambda x: (x * 2.0).sum(0), dynamic=True)
    with kiln.no_grad():
        for n, m in ((2, 3), (5, 3), (4, 7)):
            x = kiln.randn(n, m)
            assert_bitwise(compiled(x).numpy(), (x * 2.0).sum(0).numpy(), f"{n}x{m}")
    assert compiled.stats.traces == 1
    assert "s0" in compiled.graphs()[0].to_text() and "s1" in compiled.graphs()[0].to_text()


@pytest.mark.parametrize("bad", ["yes", 1, 0.5])
def test_dynamic_must_be_none_true_or_false(bad):
    with pytest.raises(TypeError, match="dynamic must be None"):
        kiln.compile(lambda x: x, dynamic=bad)


def test_a_rank_change_retraces_without_touching_the_dynamic_dims():
    compiled = kiln.compile(lambda x: x.sum(0) * 2.0)
    with kiln.no_grad():
        for shape in ((3, 4), (5, 4), (3, 4, 2), (6, 4), (2, 4, 2)):
            x = kiln.randn(*shape)
            assert_bitwise(compiled(x).numpy(), (x.sum(0) * 2.0).numpy(), str(shape))
    # (3, 4); (s0, 4); (3, 4, 2); (s0, 4, 2) after the second rank-3 size
    assert compiled.stats.traces == 4


def test_explicit_dynamic_dims_keep_their_names_and_others_become_dynamic():
    compiled = kiln.compile(lambda x: x.sum(1), dynamic_dims={0: {0: "B"}})
    with kiln.no_grad():
        for shape in ((3, 4), (5, 4), (5, 6), (2, 9), (7, 3)):
            x = kiln.randn(*shape)
            assert_bitwise(compiled(x).numpy(), x.sum(1).numpy(), str(shape))
    assert compiled.stats.traces == 2
    text = compiled.graphs()[-1].to_text()
    assert "B" in text and "s0" in text


def test_training_with_a_short_last_batch_equals_eager():
    """Outputs, grads and SGD updates of a compiled model over batches 8, 8, 5, 8, 5 equal eager's."""
    def run(compile_it):
        kiln.manual_seed(3)
        model = mlp(6, (10,), 3)
        forward = kiln.compile(model) if compile_it else model
        opt = kiln.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        rng = np.random.default_rng(0)
        losses = []
        for batch in (8, 8, 5, 8, 5):
            x = kiln.tensor(rng.standard_normal((batch, 6)).astype(np.float32))
            y = kiln.tensor(rng.integers(0, 3, batch))
            opt.zero_grad()
            loss = nn.functional.cross_entropy(forward(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().numpy().copy() for p in model.parameters()], forward

    eager_losses, eager_params, _ = run(False)
    losses, params, compiled = run(True)
    assert losses == eager_losses
    for got, want in zip(params, eager_params):
        assert_bitwise(got, want, "parameters after 5 steps")
    assert compiled.stats.traces == 2


def test_symbolic_plans_run_fused_row_and_elementwise_kernels_at_every_size():
    """LayerNorm (a row kernel) and a GELU chain (an elementwise kernel) of a symbolic plan run
    their compiled kernels at sizes other than the traced one, with eager's bits."""
    kiln.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))

    def forward(x):
        h = model(x)
        return h * (h > 0.5) + h * 0.25

    compiled = kiln.compile(forward, dynamic_dims={0: {0: "B"}})
    with kiln.no_grad():
        for batch in (96, 130, 70, 257):
            x = kiln.randn(batch, 64)
            assert_bitwise(compiled(x).numpy(), forward(x).numpy(), f"batch {batch}")
    (entry,) = compiled.cache_entries
    kinds = [type(n.prim) for n in entry.plan.graph.nodes]
    rows = [n.prim for n in entry.plan.graph.nodes if isinstance(n.prim, RowKernel)]
    assert rows and FusedElementwise in kinds
    assert all(r.fallbacks == 0 for r in rows)  # the compiled kernel ran at every batch


def test_a_symbolic_row_kernel_falls_back_where_its_reduced_axis_changes():
    """Rows reduced over a symbolic axis are not fused: their order of summation changes with it."""
    def softmax_sum(x):
        return (x - x.amax(-1, keepdim=True)).exp().sum(-1)

    compiled = kiln.compile(softmax_sum, dynamic_dims={0: {1: "T"}})
    with kiln.no_grad():
        for t in (64, 100, 33):
            x = kiln.randn(80, t)
            np.testing.assert_allclose(compiled(x).numpy(), softmax_sum(x).numpy(), rtol=1e-6)
    (entry,) = compiled.cache_entries
    assert not any(isinstance(n.prim, RowKernel) for n in entry.plan.graph.nodes)


def test_a_size_compared_in_user_code_is_guarded_even_when_it_differed_while_tracing():
    """``if x.shape[0] == 4: raise``, traced at another size, must still raise at 4."""
    def fn(x):
        if x.shape[0] == 4:
            raise IndexError("four is not allowed")
        return x + 1

    for compiled in (kiln.compile(fn), kiln.compile(fn, dynamic_dims={0: {0: "n"}})):
        compiled(kiln.ones(2))
        compiled(kiln.ones(3))
        with pytest.raises(IndexError, match="four"):
            compiled(kiln.ones(4))
        assert compiled(kiln.ones(5)).tolist() == [2.0] * 5


def test_an_automatic_dim_turned_into_a_python_number_becomes_static_again_without_a_warning():
    def fn(x):
        return (x * kiln.arange(float(x.shape[-1]))).sum(0)

    compiled = kiln.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the specialization warning is for dims dynamic_dims names
        for n in (3, 4, 5, 6, 5, 4):
            x = kiln.randn(2, n)
            assert_bitwise(compiled(x).numpy(), fn(x).numpy(), f"n {n}")
    # 3; symbolic, but pinned to 4; then 5, 6 and 4 each static (the symbolic plan's key is not looked up again)
    assert compiled.stats.traces == 5
    assert "static again: s0" in compiled.explain()
    assert not compiled._auto.by_structure


def test_a_0d_softmax_beside_a_symbolic_argument_compiles():
    """A 0-d input reduced over dim 0 (as PyTorch allows) in a plan with symbolic dims (a fuzzer find)."""
    fn = kiln.compile(lambda a, b: (F.softmax(a, dim=0), b * 2), dynamic_dims={1: {0: "B"}})
    for n in (2, 3, 5):
        a, b = kiln.tensor(0.25), kiln.ones(n)
        got, want = fn(a, b), (F.softmax(a, dim=0), b * 2)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
