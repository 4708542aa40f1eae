"""Elementwise groups in native plans read inputs the plan itself made in another order (a permuted
view of a matmul's result, a slice) through their own strides, bit for bit equal to eager.

A convolution's output is one such read: the (O, N, OH, OW) product copied into C-ordered
(N, O, OH, OW). Arrays Python holds (arguments, NumPy steps' results) must still be contiguous
or broadcasts there: their layouts are what a plan's variants are keyed on.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from jit_helpers import assert_bitwise
from native_helpers import native_cache, needs_native, node_kinds  # noqa: F401 - native_cache: an autouse fixture

from kiln.jit.backends.cpu.elementwise_groups import layout_form

pytestmark = needs_native


def _kinds_of_fused(compiled) -> list[str]:
    from native_helpers import plans_of  # noqa: PLC0415

    kinds = []
    for plan in plans_of(compiled):
        a = plan.current.analysis
        kinds += [a.kinds[id(n)] for n in a.graph.nodes if n.prim.name.startswith("fused[") and "copy" in n.prim.name]
    return kinds


@pytest.mark.parametrize("perm", [(1, 0), (0, 2, 1), (2, 0, 1)])
def test_a_copy_of_a_permuted_product_runs_natively(perm):
    rng = np.random.default_rng(0)
    shape = (6, 5) if len(perm) == 2 else (3, 6, 5)
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal((5, 7)).astype(np.float32)

    def fn(a, b):
        return ((a @ b).permute(*perm).contiguous() * 2.0 + 1.0)

    compiled = kiln.compile(fn, backend="cpu")
    for _ in range(3):
        got = compiled(kiln.tensor(a), kiln.tensor(b)).numpy()
    assert_bitwise(got, fn(kiln.tensor(a), kiln.tensor(b)).numpy(), f"permute {perm}", oracle="eager")
    assert _kinds_of_fused(compiled) == ["native"]


def test_a_convolution_needs_no_copy_of_its_product_and_equals_eager():
    """conv2d writes the C-ordered (N, O, OH, OW) result itself: the forward plan copies nothing after it."""
    rng = np.random.default_rng(1)
    x = kiln.tensor(rng.standard_normal((4, 3, 9, 9)).astype(np.float32), requires_grad=True)
    w = kiln.tensor(rng.standard_normal((5, 3, 3, 3)).astype(np.float32), requires_grad=True)

    def fn(x, w):
        return F.relu(F.conv2d(x, w, padding=1)) * 3.0

    compiled = kiln.compile(fn, backend="cpu")
    for _ in range(3):
        x.grad = w.grad = None
        out = compiled(x, w)
        out.backward(kiln.ones_like(out) * 0.5)
    got = [out.detach().numpy(), x.grad.numpy(), w.grad.numpy()]
    x.grad = w.grad = None
    want_out = fn(x, w)
    want_out.backward(kiln.ones_like(want_out) * 0.5)
    for g, e, what in zip(got, [want_out.detach().numpy(), x.grad.numpy(), w.grad.numpy()], ["out", "dx", "dw"]):
        assert_bitwise(g, e, what, oracle="eager")
    (entry,) = compiled.cache_entries
    assert not any(n.prim.name in ("copy", "permute") for n in entry.graph.nodes)


def test_layout_form_reads_through_strides_and_merges_adjacent_dims():
    # (O, N, P) laid out as a permute of C-ordered (N, O, P): O's stride is P, N's is O*P
    form, divisions = layout_form((4, 3, 16), (16, 64, 1), (4, 3, 16), 2)
    assert form.startswith("at:") and "o" in form and "j" in form and divisions == 0
    assert layout_form((4, 3), (-3, 1), (4, 3), 1) is None  # negative strides: not read this way
    flat, divisions = layout_form((2, 3, 4), (12, 4, 1), (2, 3, 4), 0)
    assert flat.endswith("j)") and "/" not in flat and "%" not in flat and divisions == 0  # C order: one run
