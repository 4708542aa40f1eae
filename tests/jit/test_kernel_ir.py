"""The kernel IR (kiln/jit/backends/render/kernel_ir.py): how the scheduler's groups lower to it,
how it prints, and the C and CUDA renderers driven by a hand-written IR alone (no graph behind it).
The C kernels run against NumPy: bit for bit where the IR asks for NumPy's order."""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.jit.backends.cpu.fuse_graph import fuse
from kiln.jit.backends.cpu.elementwise_groups import find_groups
from kiln.jit.backends.cpu.lower import (lower_channel_sum, lower_elementwise, lower_fill, lower_indexed,
                                        lower_leading_sum)
from kiln.jit.backends.cuda.kernels import render_kernel
from kiln.jit.backends.render import C
from kiln.jit.backends.render.c_kernels import render_c
from kiln.jit.backends.render.c_reducers import REDUCERS
from kiln.jit.backends.render.kernel_ir import CheckIndex, Compute, Kernel, Load, Loop, Param, Reduce, Store
from kiln.dtypes import get_dtype
from kiln.jit.frontends import trace_graph
from kiln.jit.ir import Value
from kiln.ops.primitive import REGISTRY

from native_helpers import needs_native


def _fused_kernels(fn, *args) -> list:
    return [n.prim for n in fuse(trace_graph(fn, *args), 1, 1).nodes if hasattr(n.prim, "kernel_ir")]


def test_an_elementwise_group_lowers_to_loops_loads_and_one_store() -> None:
    (kernel,) = _fused_kernels(lambda x, b: (x + b).relu() * 2.0, kiln.randn(64, 128), kiln.randn(128))
    # x is read at its own element, the bias once per column, the literal 2.0 as a scalar
    assert kernel.kernel_ir.text() == """\
kernel fused[add -> relu -> mul] (elementwise)
  out: float32[8192] (written)
  in0: float32[8192]
  in1: float32[128]
  in2: float32[1]
  for o in [0, outer) parallel:
    for j in [0, inner) vector:
      x0: float32 = in0[o * inner + j]
      x1: float32 = in1[j]
      x2: float32 = in2[0]
      t0: float32 = add(x0, x1)
      t1: float32 = relu(t0)
      t2: float32 = mul(t1, x2)
      out[o * inner + j] = t2"""


def test_softmax_lowers_to_two_reduce_axes_and_an_epilogue() -> None:
    (kernel,) = _fused_kernels(lambda x: F.softmax(x, dim=-1), kiln.randn(8, 50))
    ir = kernel.kernel_ir
    assert [(r.op, r.order) for r in ir.reductions()] == [("max", "any"), ("sum", "pairwise")]
    # max(x); sum(exp(x - max)); 1 / sum once per row; then exp(x - max) * (1 / sum) for each element
    assert ir.text() == """\
kernel fused_rows[max -> sub -> exp -> sum -> div -> mul] (rows)
  out0: float32[400] (written)
  in0: float32[400]
  in1: float32[1]
  for o in [0, outer) parallel:
    r1: float32 = in1[0]
    t0: float32 = max[any] over j in [0, inner) of x0:
      x0: float32 = in0[o * inner + j]
    t3: float32 = sum[pairwise] over j in [0, inner) of t2:
      x0: float32 = in0[o * inner + j]
      t1: float32 = sub(x0, t0)
      t2: float32 = exp(t1)
    t4: float32 = div(r1, t3)
    for j in [0, inner) vector:
      x0: float32 = in0[o * inner + j]
      t1: float32 = sub(x0, t0)
      t2: float32 = exp(t1)
      t5: float32 = mul(t2, t4)
      out0[o * inner + j] = t5"""
    assert ir.reductions()[0].row_load() is not None  # max reads x's row where it lies
    assert ir.reductions()[1].row_load() is None  # the sum's prologue is computed


def test_in_place_lowering_reads_through_the_output() -> None:
    graph = trace_graph(lambda b, g: b * 0.9 + g, kiln.randn(64, 64), kiln.randn(64, 64))
    (group,) = find_groups(graph, 1, 1)
    ir = lower_elementwise(group, ["full", "scalar", "full"], in_place=0)
    assert ir.param("out").restrict and ir.param("in0").restrict
    assert "x0: float32 = out[o * inner + j]" in ir.text() and "may be the output's own memory" in ir.text()
    aliased = lower_elementwise(group, ["row", "scalar", "full"], in_place=0)  # not read element by element
    assert not aliased.param("out").restrict and not aliased.param("in0").restrict
    assert "(written, may alias)" in aliased.text() and "x0: float32 = in0[j]" in aliased.text()
    assert "float *out" in render_c(aliased, "k") and "const float *in0" in render_c(aliased, "k")


def _row_stats(order: str, op: str = "sum") -> Kernel:
    """out0[o] = op over the row of x*x (or x itself for max), out1 = x - that, per element."""
    full = "o * inner + j"
    if op == "max":
        prologue: tuple = (Load("x0", "float32", "in0", full),)
        value = "x0"
    else:
        prologue = (Load("x0", "float32", "in0", full), Compute("t0", "float32", REGISTRY["mul"], ("x0", "x0")))
        value = "t0"
    row = (
        Reduce("t1", "float32", op, order, "j", "inner", prologue, value),
        Store("out0", "o", "t1"),
        Loop("j", "inner", "vector", (Load("x0", "float32", "in0", full),
                                      Compute("t2", "float32", REGISTRY["sub"], ("x0", "t1")),
                                      Store("out1", full, "t2"))),
    )
    params = (Param("out0", "float32", 0, written=True), Param("out1", "float32", 0, written=True),
              Param("in0", "float32", 0))
    return Kernel(f"hand-written {op}", "rows", params, (Loop("o", "outer", "parallel", row),))


def _run_rows(kernel: Kernel, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    from kiln.jit.backends.cpu.toolchain import build  # noqa: PLC0415

    fn = build("\n".join([C.prelude + REDUCERS, render_c(kernel, "kiln_fused")])).kiln_fused
    fn.restype = ctypes.c_longlong
    fn.argtypes = [ctypes.c_longlong, ctypes.c_longlong] + [ctypes.c_void_p] * 4
    outer, inner = x.shape
    stats, centered = np.empty(outer, np.float32), np.empty_like(x)
    scratch = np.empty(inner, np.float64)
    flagged = fn(outer, inner, scratch.ctypes.data, stats.ctypes.data, centered.ctypes.data, x.ctypes.data)
    return stats, centered, flagged


@needs_native
def test_c_renders_a_hand_written_pairwise_sum_bit_for_bit() -> None:
    x = np.random.default_rng(0).standard_normal((7, 1000)).astype(np.float32)
    stats, centered, flagged = _run_rows(_row_stats("pairwise"), x)
    expected = np.sum(x * x, axis=1)
    assert flagged == 0
    assert stats.tobytes() == expected.tobytes() and centered.tobytes() == (x - expected[:, None]).tobytes()


@needs_native
def test_c_renders_a_sequential_reduce_left_to_right() -> None:
    x = np.random.default_rng(1).standard_normal((3, 300)).astype(np.float32)
    stats, _, _ = _run_rows(_row_stats("sequential"), x)
    expected = np.empty(3, np.float32)
    for o in range(3):
        acc = np.float32(x[o, 0] * x[o, 0])
        for v in x[o, 1:]:
            acc = np.float32(acc + np.float32(v * v))
        expected[o] = acc
    assert stats.tobytes() == expected.tobytes()
    assert stats.tobytes() != np.sum(x * x, axis=1).tobytes()  # the orders differ on these rows


@needs_native
def test_c_max_counts_rows_whose_zero_maximum_has_both_signs() -> None:
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32) - 10
    x[1, :2] = [0.0, -0.0]  # the maximum is zero, of undecidable sign
    x[2, 5] = np.nan
    stats, _, flagged = _run_rows(_row_stats("any", "max"), x)
    assert flagged == 1
    assert stats[0] == x[0].max() and stats[3] == x[3].max() and np.isnan(stats[2])


def test_one_ir_two_languages() -> None:
    kernel = _row_stats("pairwise")
    c, cuda = render_c(kernel, "k"), render_kernel(kernel, "k")
    assert "(float *)scratch" in c and "kiln_pairwise_sumf(p1, inner)" in c and "omp" in C.prelude
    assert "scratch" not in cuda and cuda.count("kiln_block_reduce(") == 1
    assert "for (long long o = blockIdx.x; o < outer; o += gridDim.x)" in cuda
    assert "if (threadIdx.x == 0) out0[o] = t1;" in cuda  # one thread stores a per-row value
    assert "out1[o * inner + j] = t2;" in cuda and "if (threadIdx.x == 0) out1" not in cuda
    with pytest.raises(TypeError, match="expects a fused elementwise or row kernel"):
        render_kernel(object(), "k")


@needs_native
def test_a_compiled_plan_shows_its_kernel_ir() -> None:
    fast = kiln.compile(lambda x: F.softmax(x * 2.0, dim=-1))
    with kiln.no_grad():
        fast(kiln.randn(16, 32))
    (entry,) = fast.cache_entries
    text = entry.plan.kernel_ir
    assert text.startswith("kernel fused_rows[") and "sum[pairwise] over j in [0, inner)" in text


@needs_native
def test_a_native_plan_shows_its_segment_ir_and_renders_it_as_its_c() -> None:
    """`plan.segment_ir` prints each segment's statements (render/segment_ir.py); the plan's C has one function
    per segment, with an argument check per array and a call per kernel the text names."""
    w = kiln.randn(32, 8)
    fast = kiln.compile(lambda x, i: (F.gelu(x @ w) * 2.0).gather(1, i).sum(0), backend="cpu")
    x, i = kiln.randn(16, 32), kiln.tensor(np.zeros((16, 3), np.int64))
    with kiln.no_grad():
        for _ in range(2):
            fast(x, i)
    plan = fast.cache_entries[0].plan
    text = plan.segment_ir
    assert text.startswith("segment 0\n  check a0: float32[")
    assert "check a2: int64[16, 3], C order" in text and "= a0 @ a1: float32 (16x32 @ 32x8), product" in text
    calls = re.findall(r"call (kiln_\w+)\(", text)
    assert any(c.startswith("kiln_gather_") for c in calls) and "or return 1" in text
    source = "\n".join(plan.current.sources)
    assert all(f"{c}(" in source for c in calls)
    assert source.count("kiln_arg(args, ") == text.count("  check a")


def _elementwise(*body) -> Kernel:
    params = (Param("out", "float32", 4, written=True), Param("in0", "float32", 4))
    return Kernel("k", "elementwise", params, (Loop("o", "outer", "parallel", (Loop("j", "inner", "vector", body),)),))


def _indexed(*body) -> Kernel:
    params = (Param("out", "float32", 4, written=True), Param("in0", "float32", 4))
    return Kernel("k", "indexed", params, (Loop("o", "outer", "parallel", (Loop("j", "inner", "serial", body),)),))


LOAD = Load("x0", "float32", "in0", "o * inner + j")
NEG = Compute("t0", "float32", REGISTRY["neg"], ("x0",))


@pytest.mark.parametrize("kernel, message", [
    (_elementwise(LOAD, Compute("t0", "float32", REGISTRY["neg"], ("x9",))), "'x9' is not defined before it"),
    (_elementwise(NEG, LOAD), "'x0' is not defined before it"),
    (_elementwise(LOAD, NEG, Store("in0", "o * inner + j", "t0")), "stores into input 'in0'"),
    (_elementwise(Load("x0", "float32", "in7", "j"), Store("out", "j", "x0")), "no buffer named 'in7'"),
    (_elementwise(Load("x0", "float32", "in0", "o * stride + j")), "the index uses ['stride']"),
    (_elementwise(LOAD, LOAD), "'x0' is defined twice"),
    (_elementwise(Loop("j", "inner", "vector", ())), "loop variable 'j' is already bound"),
    (_elementwise(Loop("k", "inner", "diagonal", ())), "loop kind 'diagonal'"),
    (_elementwise(Reduce("t0", "float32", "sum", "pairwise", "k", "inner", (LOAD,), "t9")),
     "its value 't9' is not computed in its body"),
    (_elementwise(Reduce("t0", "float32", "prod", "pairwise", "k", "inner", (LOAD,), "x0")), "a reduction is"),
    (_elementwise(Load("i", "int64", "in0", "j"), CheckIndex("w", "i", 4)), "only an indexed kernel checks indices"),
    (_elementwise(Load("i", "int64", "in0", "j"), Load("x", "float32", "in0", "i")), "the index uses ['i']"),
    (_indexed(LOAD, CheckIndex("w", "x0", 4)), "'x0' is not an int64 local defined before it"),
    (_indexed(Load("i", "int64", "in0", "j"), CheckIndex("w", "i", 4, code=0)), "must be nonzero"),
    (_indexed(Load("x", "float32", "in0", "w"), Load("i", "int64", "in0", "j"), CheckIndex("w", "i", 4)),
     "the index uses ['w']"),
])
def test_verify_names_what_is_wrong(kernel: Kernel, message: str) -> None:
    from kiln.jit.backends.render.kernel_ir import KernelIRError  # noqa: PLC0415

    with pytest.raises(KernelIRError, match=re.escape(message)):
        kernel.verify()


def test_verify_accepts_lowered_kernels_and_sibling_recomputation() -> None:
    _elementwise(LOAD, NEG, Store("out", "o * inner + j", "t0")).verify()
    strided = Load("x0", "float32", "in0", "(o % 6) * 20 + (long long)(((unsigned)j / 15u) * 5u + ((unsigned)j % 5u))")
    _elementwise(strided, NEG, Store("out", "o * inner + j", "t0")).verify()  # 15u: a literal, not a name
    _row_stats("pairwise").verify()  # x0 is loaded in the reduce axis and again in the epilogue
    for kernel in _fused_kernels(lambda x: F.log_softmax(x * 2.0, dim=-1), kiln.randn(4, 33)):
        kernel.kernel_ir.verify()


def test_a_fill_lowers_to_one_scalar_load_and_a_vector_store() -> None:
    kernel = lower_fill(Value((4, 6), get_dtype("float64")))
    kernel.verify()
    assert kernel.text() == """\
kernel fill[float64] (elementwise)
  out: float64[24] (written)
  in0: float64[1]
  for o in [0, outer) parallel:
    for j in [0, inner) vector:
      x0: float64 = in0[0]
      out[o * inner + j] = x0"""


@needs_native
@pytest.mark.parametrize("value", [-0.0, float("nan"), 3.5])
def test_a_native_fill_is_rendered_from_the_kernel_ir_with_the_values_bits(value: float) -> None:
    """``full`` in a native plan: one fill function from the IR, shared by the plan's fills of a dtype."""
    f = kiln.compile(lambda x: (x + 1.0, kiln.full((40, 30), value), kiln.full((7,), value)), backend="cpu")
    x = kiln.randn(40, 30)
    with kiln.no_grad():
        outs = [f(x) for _ in range(2)][-1]
    sources = f.cache_entries[0].plan.current.sources
    assert sum(s.count("static void kiln_fill_loop_") for s in sources) == 1
    want = np.full((), value, np.float32).view(np.uint32)
    for out, shape in zip(outs[1:], [(40, 30), (7,)]):
        assert out.shape == shape and (out.numpy().view(np.uint32) == want).all()


@needs_native
@pytest.mark.parametrize("rows", [0, 1, 2, 37])
@pytest.mark.parametrize("from_zero", [True, False])
def test_a_sum_over_leading_rows_adds_them_in_order(rows: int, from_zero: bool) -> None:
    """lower_leading_sum: each column is (0 +) row0 + row1 + ... in turn, bit for bit; a -0.0 column stays
    -0.0 only without the leading zero."""
    from kiln.jit.backends.cpu.toolchain import build  # noqa: PLC0415

    cols = 70
    kernel = lower_leading_sum(rows, cols, "float32", from_zero)
    kernel.verify()
    fn = build("\n".join([C.prelude, render_c(kernel, "kiln_colsum")])).kiln_colsum
    fn.restype = None
    fn.argtypes = [ctypes.c_longlong, ctypes.c_longlong] + [ctypes.c_void_p] * 3
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
    x[:, 3] = -0.0
    zero = np.zeros(1, np.float32)
    out = np.full(cols, np.nan, np.float32)
    fn(1, cols, out.ctypes.data, x.ctypes.data, zero.ctypes.data)
    want = np.zeros(cols, np.float32) if from_zero or rows == 0 else x[0].copy()
    for r in range(0 if from_zero else 1, rows):
        want = want + x[r]
    assert out.tobytes() == want.tobytes()
    assert np.signbit(out[3]) == (rows > 0 and not from_zero)


@needs_native
@pytest.mark.parametrize("lead, channels, run", [(3, 5, 200), (1, 4, 7), (2, 3, 1)])
def test_a_channel_sum_adds_each_runs_pairwise_sum_in_order(lead: int, channels: int, run: int) -> None:
    """lower_channel_sum: channel c is 0 + pairwise(x[0, c]) + pairwise(x[1, c]) + ..., bit for bit with NumPy
    summing each run (a conv bias's gradient over N, C, H*W), the runs reduced where they lie."""
    from kiln.jit.backends.cpu.toolchain import build  # noqa: PLC0415

    kernel = lower_channel_sum(lead, channels, run, "float32")
    kernel.verify()
    source = render_c(kernel, "kiln_channel_sum")
    assert "scratch" not in source.split("{", 1)[1].split("return flagged")[0]  # each run is read in place
    fn = build("\n".join([C.prelude + REDUCERS, source])).kiln_channel_sum
    fn.restype = ctypes.c_longlong
    fn.argtypes = [ctypes.c_longlong, ctypes.c_longlong] + [ctypes.c_void_p] * 4
    x = np.random.default_rng(run).standard_normal((lead, channels, run)).astype(np.float32)
    zero, out = np.zeros(1, np.float32), np.full(channels, np.nan, np.float32)
    assert fn(channels, run, None, out.ctypes.data, x.ctypes.data, zero.ctypes.data) == 0
    want = np.zeros(channels, np.float32)
    for n in range(lead):
        want = want + x[n].sum(axis=1)
    assert out.tobytes() == want.tobytes()


@pytest.mark.parametrize("index, direct", [("o * inner + j", "o"), ("(n * outer + o) * inner + j", "(n * outer + o)"),
                                           ("n * outer + o * inner + j", None), ("(n) * (o) * inner + j", None),
                                           ("(j + o) * inner + j", None), ("o * 2 + j", None)])
def test_a_reduce_reads_its_row_in_place_only_where_the_index_is_one_row(index: str, direct: str | None) -> None:
    r = Reduce("s", "float32", "sum", "pairwise", "j", "inner", (Load("x", "float32", "in0", index),), "x")
    found = r.row_load()
    assert (found[1] if found else None) == direct


def test_a_gather_lowers_to_a_checked_index_and_a_load_through_it() -> None:
    kernel = lower_indexed("gather", 3, 2, 5, "float64")
    kernel.verify()
    assert kernel.text() == """\
kernel gather along the last axis of 5[float64] (indexed)
  out: float64[6] (written)
  in0: float64[15]
  in1: int64[6]
  for o in [0, outer) parallel:
    for c in [0, inner) serial:
      i: int64 = in1[o * inner + c]
      w: int64 = wrap(i, 5) or return 1
      x: float64 = in0[o * 5 + w]
      out[o * inner + c] = x"""
    lower_indexed("scatter_add", 3, 2, 5, "float32").verify()
    with pytest.raises(ValueError, match="'scatter_max' is not 'gather' or 'scatter_add'"):
        lower_indexed("scatter_max", 3, 2, 5, "float32")


@needs_native
@pytest.mark.parametrize("kind", ["gather", "scatter_add"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_indexed_kernels_pick_and_add_as_numpy_and_refuse_an_index_out_of_range(kind: str, dtype: str) -> None:
    """lower_indexed rendered alone: np.take_along_axis's values, np.add.at's order (repeated indices add one
    after another), negative indices from the end; an index out of range makes the kernel return 1."""
    from kiln.jit.backends.cpu.toolchain import build  # noqa: PLC0415

    rows, k, n = 6, 9, 5
    kernel = lower_indexed(kind, rows, k, n, dtype)
    fn = build("\n".join([C.prelude, render_c(kernel, "kiln_indexed")])).kiln_indexed
    fn.restype = ctypes.c_longlong
    fn.argtypes = [ctypes.c_longlong, ctypes.c_longlong] + [ctypes.c_void_p] * len(kernel.params)
    rng = np.random.default_rng(k)
    x = (rng.standard_normal((rows, n)) * 1e3).astype(dtype)
    src = rng.standard_normal((rows, k)).astype(dtype)
    idx = rng.integers(-n, n, (rows, k))
    out = np.full((rows, k) if kind == "gather" else (rows, n), np.nan, dtype)
    args = [out.ctypes.data, x.ctypes.data, idx.ctypes.data] + ([src.ctypes.data] if kind == "scatter_add" else [])
    assert fn(rows, k, *args) == 0
    if kind == "gather":
        want = np.take_along_axis(x, idx, axis=-1)
    else:
        want = x.copy()
        np.add.at(want, (np.arange(rows)[:, None], idx), src)
    assert out.tobytes() == want.tobytes()
    for bad in (n, -n - 1):
        idx[4, 7] = bad
        assert fn(rows, k, *args) == 1


def test_segment_ir_text_and_c_spell_every_statement() -> None:
    """Each statement of the segment IR reads as one line (or a block) of text and renders as C."""
    from kiln.jit.backends.render.c_segments import render_segment  # noqa: PLC0415
    from kiln.jit.backends.render.segment_ir import (BlockLoop, BlockPointer, Call, CheckArg, Comment,  # noqa: PLC0415
                                                     Constant, Fold, MatrixProduct, Pointer, Segment, Unfold,
                                                     segment_text)

    a0, arena, lit = Pointer("float32", "arg", 0), Pointer("float32", "arena", 64, 8), Pointer("float32", "literal", 2)
    segment = Segment(3, (
        CheckArg(0, "float32", 0, (4, 6), None, writable=True),
        CheckArg(1, "float64", 1, (6,), (8,)),
        Comment("a kernel"),
        Call("kiln_loop_3_0", 4, 6, (a0, lit, Constant("kiln_fill3_0")), on_fail=2),
        Call("kiln_sum_3_1", 6, 4, (arena, a0), scratch="null", discard=True),
        BlockLoop(8192, 4096, (Call("kiln_loop_3_2", 1, "kiln_n", (BlockPointer(a0), lit)),)),
        MatrixProduct("float32", arena, a0, lit, 4, 6, 6, (6, 1), (6, 1)),
        Unfold("float32", a0, arena, (1, 1, 4, 6), (24, 24, 6, 1), (3, 3, 2, 4), (72, 72, 24, 8), (1, 1), (0, 0),
               (1, 1), 0.0),
        Fold("float32", arena, a0, (1, 1, 4, 6), (3, 3, 2, 4), (72, 72, 24, 8, 4, 1), (1, 1), (1, 1)),
    ))
    text = segment_text(segment)
    assert text.splitlines()[:5] == [
        "segment 3",
        "  check a0: float32[4, 6], C order, writable or return 1",
        "  check a1: float64[6], byte strides [8] or return 1",
        "  # a kernel",
        "  call kiln_loop_3_0(outer=4, inner=6, a0, lit2, kiln_fill3_0) or return 2"]
    assert "  call kiln_sum_3_1(outer=6, inner=4, scratch=null, arena@64+8, a0) (result ignored)" in text
    assert ("  for each block of 4096 of 8192 elements:\n"
            "    call kiln_loop_3_2(outer=1, inner=kiln_n, a0+block, lit2)") in text
    assert "arena@64+8 = a0 @ lit2: float32 (4x6 @ 6x6), product" in text
    assert "= unfold a0:" in text and "a0 = fold arena@64+8:" in text
    c = render_segment(segment)
    assert c.startswith("long long kiln_segment_3(const void *args, char *arena) {")
    assert "if (!kiln_writable(args, 0)) return 1;" in c and "static const long long kiln_s1[] = {8};" in c
    assert "if (kiln_loop_3_0(4, 6, ((float *)a0), kiln_lit2.v, kiln_fill3_0.v)) return 2;" in c
    assert "(void)kiln_sum_3_1(6, 4, (void *)0, (((float *)(arena + 64)) + 8), ((float *)a0));" in c
    assert "kiln_loop_3_2(1, kiln_n, (((float *)a0) + kiln_b), kiln_lit2.v);" in c
    assert "kiln_matmul2d_s(" in c and c.rstrip().endswith("return 0;\n}")
    with pytest.raises(ValueError, match="one of \\('arg', 'arena', 'literal'\\)"):
        render_segment(Segment(0, (Call("f", 1, 1, (Pointer("float32", "stack", 0),)),)))
