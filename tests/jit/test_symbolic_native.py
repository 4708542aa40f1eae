"""Native plans for every size (kiln/jit/backends/cpu/size_guards.py): a graph with dynamic dims runs as
generated code whose sizes are read per call.

The oracle is eager kiln on the same inputs, bit for bit (outputs, grads, parameter updates), at sizes
other than the traced one; the plan's counters say which calls ran its code and which the reference.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.jit.backends.cpu import runtime
from kiln.jit.backends.cpu.arena import Interval, assign_symbolic_offsets, round_up
from kiln.jit.backends.cpu.size_guards import SymbolicSizeUsed, recording_sizes
from kiln.jit.backends.render.size_text import c_size, dim_variable, guard_source, py_size
from kiln.jit.symbolic import Expr, SymInt
from kiln.models.gpt import gpt

from jit_helpers import assert_bitwise
from native_helpers import native_cache, needs_native, plans_of  # noqa: F401 - native_cache: an autouse fixture

pytestmark = needs_native


def _sizes(**values):
    return {name: SymInt(v, Expr.sym(name)) for name, v in values.items()}


def _native_plans(compiled) -> list:
    return [p for p in plans_of(compiled) if isinstance(p, runtime.NativePlan)]


def test_an_mlp_runs_one_native_plan_at_every_batch():
    kiln.manual_seed(0)
    # (no float32 transcendental: generated code computes those within a few ulp of NumPy, not to its bits)
    model = nn.Sequential(nn.Linear(32, 48), nn.ReLU(), nn.LayerNorm(48), nn.Linear(48, 48), nn.Hardtanh(),
                          nn.Linear(48, 10))
    compiled = kiln.compile(model, dynamic_dims={0: {0: "B"}})
    rng = np.random.default_rng(0)
    with kiln.no_grad():
        for batch in (8, 3, 16, 40, 200, 33, 8, 2):
            x = kiln.tensor(rng.standard_normal((batch, 32)).astype(np.float32))
            assert_bitwise(compiled(x).numpy(), model(x).numpy(), f"batch {batch}")
    (plan,) = _native_plans(compiled)
    assert plan.analysis.dims == ("B",) and plan.size_guards is not None
    assert plan.fallback_calls == 0, "a batch ran the reference plan"
    assert "kiln_dim_B" in plan.source and compiled.stats.traces == 1


def test_a_training_step_with_a_dynamic_batch_matches_eager_grads_and_updates():
    def make():
        kiln.manual_seed(1)
        model = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.LayerNorm(24), nn.Linear(24, 3))
        return model, kiln.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step_of(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = kiln.nn.functional.mse_loss(model(x), y)  # (no exp: see test_an_mlp_runs_...)
            loss.backward()
            opt.step()
            return loss
        return step

    eager_model, eager_opt = make()
    model, opt = make()
    compiled = kiln.compile(step_of(model, opt), dynamic_dims={0: {0: "B"}, 1: {0: "B"}})
    eager = step_of(eager_model, eager_opt)
    rng = np.random.default_rng(2)
    for batch in (16, 5, 30, 16, 9):
        x = kiln.tensor(rng.standard_normal((batch, 12)).astype(np.float32))
        y = kiln.tensor(rng.standard_normal((batch, 3)).astype(np.float32))
        assert_bitwise(compiled(x, y).detach().numpy(), eager(x, y).detach().numpy(), f"loss at batch {batch}")
    for got, want in zip(model.parameters(), eager_model.parameters()):
        assert_bitwise(got.detach().numpy(), want.detach().numpy(), "parameters")
    (plan,) = _native_plans(compiled)
    assert plan.fallback_calls == 0
    assert compiled.stats.cache_size == 1  # (the first step traces again once the momentum buffers exist)


def test_a_growing_sequence_runs_one_native_plan_at_every_length():
    """Text generation without flags: the sequence dim becomes dynamic at the second length, and that plan's
    native code (attention's causal mask sliced to the length, read through its strides) serves every later
    length. GELU and softmax compute exp and tanh in generated code: within a few ulp of NumPy."""
    kiln.manual_seed(0)
    model = gpt(vocab=40, n_layer=1, n_head=2, d_model=16, block_size=80).eval()
    compiled = kiln.compile(model)
    rng = np.random.default_rng(7)
    with kiln.no_grad():
        for length in range(8, 40):
            idx = kiln.tensor(rng.integers(0, 40, (1, length)))
            np.testing.assert_allclose(compiled(idx).numpy(), model(idx).numpy(), rtol=1e-5, atol=1e-6)
    assert compiled.stats.traces == 2
    plan = compiled.cache_entries[-1].plan
    assert isinstance(plan, runtime.NativePlan) and plan.analysis.dims == ("s0",)
    assert plan.fallback_calls == 0


def test_a_size_that_answers_a_lowering_comparison_otherwise_runs_the_reference():
    """Whether the Sum kernel adds a short row by chaining its slices depends on the whole array's size (from
    4096 elements per row element on): the traced size does not, a batch of 5000 does."""
    def f(x):
        return (x * 2.0 + 1.0).sum(-1)

    compiled = kiln.compile(f, dynamic_dims={0: {0: "B"}})
    rng = np.random.default_rng(3)
    with kiln.no_grad():
        for batch in (8, 20, 5000, 9):
            x = kiln.tensor(rng.standard_normal((batch, 3)).astype(np.float32))
            assert_bitwise(compiled(x).numpy(), f(x).numpy(), f"batch {batch}")
    (plan,) = _native_plans(compiled)
    assert plan.fallback_calls == 1  # (5000 rows: the guard on 3*B >= 12288 answers otherwise)
    assert any(str(expr) == "(3*B)>=12288" and not result for expr, result in plan.size_guards)


def test_symbolic_params_of_numpy_steps_are_evaluated_per_call():
    """A reshape to a size of the call, between native nodes, gets this call's sizes."""
    def f(x):
        b = x.shape[0]
        h = (x * 3.0).reshape(b, 4, 6).transpose(1, 2).reshape(b * 6, 4)
        return (h + 1.0).relu()

    compiled = kiln.compile(f, dynamic_dims={0: {0: "B"}})
    rng = np.random.default_rng(4)
    with kiln.no_grad():
        for batch in (6, 7, 30):
            x = kiln.tensor(rng.standard_normal((batch, 24)).astype(np.float32))
            assert_bitwise(compiled(x).numpy(), f(x).numpy(), f"batch {batch}")
    (plan,) = _native_plans(compiled)
    assert plan.fallback_calls == 0


def test_threads_calling_one_plan_at_different_sizes_each_get_their_own():
    kiln.manual_seed(5)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    compiled = kiln.compile(model, dynamic_dims={0: {0: "B"}})
    rng = np.random.default_rng(5)
    inputs = {b: kiln.tensor(rng.standard_normal((b, 64)).astype(np.float32)) for b in (4, 9, 50, 130)}
    with kiln.no_grad():
        compiled(inputs[4])
        compiled(inputs[9])
        want = {b: model(x).numpy() for b, x in inputs.items()}
    wrong: list = []

    def worker(b: int) -> None:
        with kiln.no_grad():
            for _ in range(30):
                if not np.array_equal(compiled(inputs[b]).numpy(), want[b]):
                    wrong.append(b)

    threads = [threading.Thread(target=worker, args=(b,)) for b in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
    (plan,) = _native_plans(compiled)
    assert plan.fallback_calls == 0


def test_an_input_in_another_layout_runs_the_reference():
    compiled = kiln.compile(lambda x: (x * 2.0).relu() + 1.0, dynamic_dims={0: {0: "B"}})
    rng = np.random.default_rng(6)
    with kiln.no_grad():
        x = kiln.tensor(rng.standard_normal((5, 7)).astype(np.float32))
        compiled(x)
        t = kiln.tensor(rng.standard_normal((9, 6)).astype(np.float32)).T  # (6, 9), not C-contiguous
        assert_bitwise(compiled(t).numpy(), ((t * 2.0).relu() + 1.0).numpy(), "a transposed input")
    plan = compiled.cache_entries[0].plan
    assert isinstance(plan, runtime.NativePlan) and plan.analysis.dims == ("B",)
    assert plan.fallback_calls + len(compiled.cache_entries) - 1 == 1  # (the reference, or a plan of its own)


# ---- the pieces -------------------------------------------------------------------------------
def test_lowering_records_every_comparison_and_refuses_plain_sizes():
    B = _sizes(B=8)["B"]
    with recording_sizes() as guards:
        assert B * 4 > 16 and not B == 256  # kiln's own unequal sizes are guarded here too
        with pytest.raises(SymbolicSizeUsed):
            int(B)
        with pytest.raises(SymbolicSizeUsed):
            range(B)
        with pytest.raises(SymbolicSizeUsed):
            f"{B * 2}"
    assert [(str(e), r) for e, r in guards] == [("(4*B)>16", True), ("B==256", False)]


def test_sizes_are_spelled_as_c_and_python_expressions_of_the_call():
    s = _sizes(B=8, T=5)
    n = (s["B"] * s["T"] * 12 + 63) // 64 * 64
    assert c_size(7) == 7 and "/" in c_size(n) and "//" not in c_size(n)
    env = {dim_variable("B"): 11, dim_variable("T"): 3}
    assert eval(py_size(n), {}, env) == (11 * 3 * 12 + 63) // 64 * 64  # noqa: S307 - our own expression
    guards = [(Expr(">=", n.expr, 256), True), (Expr("==", s["B"].expr, 1), False)]
    test = guard_source(guards)
    assert eval(test, {}, env) is True  # noqa: S307
    assert eval(test, {}, {**env, dim_variable("B"): 1}) is False  # noqa: S307
    assert dim_variable("batch size") == "kiln_dim_batch_20_size"


def test_symbolic_arena_offsets_never_overlap_buffers_live_at_once():
    s = _sizes(B=8, T=4)
    B, T = s["B"], s["T"]
    intervals = [Interval("a", B * 40, 0, 2), Interval("b", B * 40, 1, 3), Interval("c", B * 40, 3, 5),
                 Interval("d", 1000, 0, 5), Interval("e", B * T * 4, 2, 4), Interval("f", 300, 4, 5)]
    offsets, total = assign_symbolic_offsets(intervals, 64)
    assert offsets["c"] is offsets["a"] or str(offsets["c"]) == str(offsets["a"])  # "a" is dead when "c" starts
    for env in ({"B": 2, "T": 2}, {"B": 8, "T": 4}, {"B": 301, "T": 77}):
        def at(x):
            return x.expr.evaluate(env) if isinstance(x, SymInt) else x

        spans = {iv.key: (at(offsets[iv.key]), at(offsets[iv.key]) + at(round_up(iv.nbytes)), iv) for iv in intervals}
        for k1, (s1, e1, iv1) in spans.items():
            assert s1 >= 64 and e1 <= at(total) and s1 % 64 == 0
            for k2, (s2, e2, iv2) in spans.items():
                if k1 < k2 and iv1.first <= iv2.last and iv2.first <= iv1.last:
                    assert e1 <= s2 or e2 <= s1, (k1, k2, env)
