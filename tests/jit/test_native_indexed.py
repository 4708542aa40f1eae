"""gather and scatter_add along the last axis in the native runtime (schedule.py, segcode.py).

A loss picking its targets' logits (cross_entropy's gather, and the scatter_add of its
backward) runs inside the generated code. Checked against eager NumPy bit for bit: negative
indices (take_along_dim), repeated indices adding in NumPy's order (np.add.at), leading
batch dims; an index out of range hands the call back to NumPy, which raises as eager does.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.functional.shape import gather_unchecked, scatter_add_unchecked
from jit_helpers import bits
from native_helpers import native_cache, needs_native  # noqa: F401 - native_cache: an autouse fixture

pytestmark = needs_native


def _kinds(compiled) -> dict[str, str]:
    plan = compiled.cache_entries[0].plan
    return {n.prim.name: plan.current.analysis.kinds[id(n)] for n in plan.graph.nodes}


CASES = [
    ("take_along_dim", lambda x, i, s: kiln.take_along_dim(x, i, -1) * 2.0),
    ("gather", lambda x, i, s: kiln.functional.gather(x, -1, i) + 1.0),
    ("scatter_add", lambda x, i, s: kiln.functional.scatter_add(x * 1.0, -1, i, s)),
]


@pytest.mark.parametrize("name, f", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("shape, k", [((4, 7), 3), ((2, 3, 5), 6), ((1, 10), 1)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_indexed_ops_run_natively_with_eagersbits(name, f, shape, k, dtype):
    rng = np.random.default_rng(0)
    n = shape[-1]
    x = kiln.tensor((rng.standard_normal(shape) * 100).astype(dtype))
    idx = rng.integers(-n, n, shape[:-1] + (k,))  # repeats (k may exceed n), and negatives where allowed
    idx = kiln.tensor(idx if name == "take_along_dim" else idx % n)
    src = kiln.tensor(rng.standard_normal(shape[:-1] + (k,)).astype(dtype))
    compiled = kiln.compile(f, backend="cpu")
    with kiln.no_grad():
        compiled(x, idx, src)
        got, want = compiled(x, idx, src).numpy(), f(x, idx, src).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(bits(got), bits(want))
    prim = "gather" if name != "scatter_add" else "scatter_add"
    assert _kinds(compiled)[prim] == "native"


@pytest.mark.parametrize("op", ["gather", "scatter_add"])
def test_an_index_out_of_range_raises_as_in_eager(op):
    def f(x, i, s):
        return gather_unchecked(x * 1.0, 1, i) if op == "gather" else scatter_add_unchecked(x * 1.0, 1, i, s)

    x = kiln.tensor(np.ones((2, 4), np.float32))
    src = kiln.tensor(np.ones((2, 2), np.float32))
    good, bad = kiln.tensor(np.array([[0, 3], [1, -4]])), kiln.tensor(np.array([[0, 3], [1, 4]]))
    compiled = kiln.compile(f, backend="cpu")
    with kiln.no_grad():
        np.testing.assert_array_equal(compiled(x, good, src).numpy(), f(x, good, src).numpy())
        assert _kinds(compiled)[op] == "native"
        with pytest.raises(IndexError):
            f(x, bad, src)
        with pytest.raises(IndexError):
            compiled(x, bad, src)
        np.testing.assert_array_equal(compiled(x, good, src).numpy(), f(x, good, src).numpy())


@pytest.mark.parametrize("op", ["gather", "scatter_add"])
def test_a_team_shares_the_rows_and_any_thread_hands_a_bad_index_back(op, monkeypatch):
    """Above the team threshold the rows are split over kernel threads: each row is still picked or added in
    NumPy's order, and an index out of range in any thread's rows hands the call back to NumPy, which raises."""
    from kiln.jit.backends.cpu import parallel, toolchain  # noqa: PLC0415

    if not toolchain.openmp_flags(toolchain.compiler_command()):
        pytest.skip("the C compiler builds no OpenMP kernels")
    threads, minimum = parallel.kernel_threads(), parallel.min_elements()
    parallel.set_kernel_threads(2)
    parallel.set_min_elements(64)
    try:
        def f(x, i, s):  # the indexed op alone: the team counted is its own
            return gather_unchecked(x, 1, i) if op == "gather" else scatter_add_unchecked(x, 1, i, s)

        rng = np.random.default_rng(3)
        x = kiln.tensor(rng.standard_normal((64, 9)).astype(np.float32))
        idx = rng.integers(0, 9, (64, 12))
        src = kiln.tensor(rng.standard_normal((64, 12)).astype(np.float32))
        compiled = kiln.compile(f, backend="cpu")
        with kiln.no_grad():
            compiled(x, kiln.tensor(idx), src)
            before = parallel.teams_run()
            got = compiled(x, kiln.tensor(idx), src).numpy()
            assert parallel.teams_run() > before
            np.testing.assert_array_equal(bits(got), bits(f(x, kiln.tensor(idx), src).numpy()))
            assert _kinds(compiled)[op] == "native"
            idx[60, 5] = 9  # in the second thread's rows
            with pytest.raises(IndexError):
                compiled(x, kiln.tensor(idx), src)
    finally:
        parallel.set_kernel_threads(threads)
        parallel.set_min_elements(minimum)
