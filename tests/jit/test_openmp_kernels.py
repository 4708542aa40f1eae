"""Generated kernels on several threads (render/openmp.py, cpu/parallel.py, toolchain.py's OpenMP probe).

Each element or row is computed by one thread with the serial code, so a team's results must
equal the same library run serially bit for bit (and eager, where the kernel is exact), NaN
and inf included. The team counters in parallel.TEAM show that a team really ran: they only
move inside the OpenMP region, so without the pragma (or without -fopenmp) these tests fail.
"""
from __future__ import annotations

import ctypes
import logging
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.jit.backends import cpu
from kiln.jit.backends.cpu import blas_team, parallel, toolchain
from kiln.jit.backends.render import C

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

DTYPES = ["float32", "float64"]


def _openmp() -> bool:
    return cpu.available() and bool(toolchain.openmp_flags(toolchain.compiler_command()))


needs_openmp = pytest.mark.skipif(not _openmp(), reason="the C compiler builds no OpenMP kernels")


@pytest.fixture
def team(monkeypatch, tmp_path):
    """A fresh kernel cache; two kernel threads at the default threshold; settings restored after."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    # teams regardless of which libgomp loaded first (the wait policy changes speed, not results); NumPy's
    # OpenBLAS keeps its own threads, off a libgomp whose policy kiln did not choose (blas_team.py)
    cpu._reset_state()
    monkeypatch.setattr(toolchain, "_runtime_prepared", [True])
    monkeypatch.setattr(blas_team, "_state", {"shared": False})
    threads, minimum = parallel.kernel_threads(), parallel.min_elements()
    parallel.set_kernel_threads(2)
    parallel.set_min_elements(parallel.MIN_ELEMENTS)
    yield
    parallel.set_kernel_threads(threads)
    parallel.set_min_elements(minimum)
    cpu._reset_state()


@pytest.fixture(params=[True, False], ids=["native", "kernels"])
def native(request, monkeypatch):
    """Run plans through the native runtime (segments) or kernel by kernel from Python."""
    monkeypatch.setattr(cpu, "NATIVE_RUNTIME", request.param)
    return request.param


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.itemsize}")


def assert_bitwise(got, want, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape)
    differ = (_bits(got) != _bits(want)) & ~(np.isnan(got) & np.isnan(want))
    assert not differ.any(), f"{what}: {int(differ.sum())} of {differ.size} elements differ"


def _data(shape, dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    flat = x.reshape(-1, x.shape[-1])
    flat[1, 5] = np.nan
    flat[-2, 7] = np.inf
    flat[-1, 3] = -np.inf
    flat[flat.shape[0] // 2, :8] = -0.0
    return x


def _serial_and_team(fn, *arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """fn's compiled results on one thread and on a team of two, and the size of the team that ran."""
    compiled = kiln.compile(fn, backend="cpu")
    tensors = [kiln.tensor(a) for a in arrays]
    parallel.set_kernel_threads(1)
    compiled(*tensors)  # trace and build
    serial = compiled(*tensors).numpy().copy()
    parallel.set_kernel_threads(2)
    before = parallel.teams_run()
    parallel.TEAM[4] = 0
    teamed = compiled(*tensors).numpy().copy()
    for _ in range(2):  # threads sharing memory they must not share would differ from call to call
        assert_bitwise(compiled(*tensors).numpy(), teamed, "one team call vs another")
    ran = parallel.teams_run() - before
    return serial, teamed, parallel.last_team_size() if ran else 0


def _chain(x, b):
    return ((x * 1.5 - b) / (x.abs() + 1.0)).relu() * x + b


@needs_openmp
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,bshape", [((3, 100003), (3, 100003)), ((8193, 33), (33,))],
                         ids=["columns", "rows"])
def test_elementwise_chain_on_a_team_equals_serial_and_eager(team, native, dtype, shape, bshape):
    x, b = _data(shape, dtype, 1), _data(bshape, dtype, 2) if len(bshape) > 1 else \
        np.random.default_rng(3).standard_normal(bshape).astype(dtype)
    serial, teamed, size = _serial_and_team(_chain, x, b)
    assert size == 2, "no team ran above the threshold"
    assert_bitwise(teamed, serial, "team vs serial")
    assert_bitwise(teamed, _chain(kiln.tensor(x), kiln.tensor(b)).numpy(), "team vs eager")


def _layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


@needs_openmp
@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_on_a_team_equals_serial_and_eager(team, native, dtype):
    x = _data((2047, 1024), dtype, 4)  # odd rows; the variance's operand goes through each thread's scratch row
    w, b = _data((4, 1024), dtype, 5)[0], _data((4, 1024), dtype, 6)[1]
    w[5] = b[5] = 1.0  # a NaN-free weight and bias
    serial, teamed, size = _serial_and_team(_layer_norm, x, w, b)
    assert size == 2, "no team ran above the threshold"
    assert_bitwise(teamed, serial, "team vs serial")
    assert_bitwise(teamed, _layer_norm(kiln.tensor(x), kiln.tensor(w), kiln.tensor(b)).numpy(), "team vs eager")


@needs_openmp
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_on_a_team_equals_serial(team, native, dtype):
    x = _data((777, 513), dtype, 7)
    serial, teamed, size = _serial_and_team(lambda t: F.softmax(t, -1), x)
    assert size == 2, "no team ran above the threshold"
    assert_bitwise(teamed, serial, "team vs serial")
    want = F.softmax(kiln.tensor(x), -1).numpy()
    np.testing.assert_allclose(teamed, want, rtol=1e-5 if dtype == "float32" else 1e-12, atol=0)


@needs_openmp
def test_below_the_threshold_kernels_run_serially(team, native):
    x = _data((64, 64), "float32", 8)  # 4096 elements
    serial, teamed, size = _serial_and_team(lambda t: _layer_norm(t, None, None) * 2.0, x)
    assert size == 0, "a kernel below the threshold started a team"
    assert_bitwise(teamed, serial, "small")
    parallel.set_min_elements(1000)  # the same call above a lowered threshold does start one
    before = parallel.teams_run()
    compiled = kiln.compile(lambda t: _layer_norm(t, None, None) * 2.0, backend="cpu")
    for _ in range(2):
        compiled(kiln.tensor(x))
    assert parallel.teams_run() > before


def test_the_kernel_source_runs_its_loops_on_a_team():
    lines = C.function("k", "void", ["long long outer", "long long inner", "float *restrict out"],
                       ["    " + C.outer_loop("o", "outer"), "        " + C.inner_loop("j", "inner"),
                        "            out[o * inner + j] = 0;", "        }", "    }"], split_inner=True)
    source = "\n".join(lines)
    assert "#pragma omp parallel num_threads(kiln_n)" in source
    assert "for (long long o = kiln_o0; o < kiln_o1; o++)" in source
    assert "k_range(0, outer, 0, inner, outer, inner, out);" in source  # the serial path: all of it
    rows = "\n".join(C.function("r", "long long", ["long long outer", "long long inner", "void *scratch"],
                                ["    return 0;"]))
    assert "reduction(+:kiln_sum)" in rows and "malloc" in rows and "kiln_thread()" in rows


@needs_openmp
def test_each_thread_of_a_row_kernel_gets_its_own_scratch_row(team):
    """A kernel that records, per row, the scratch row it was given: the two threads' rows must not overlap."""
    body = ["    " + C.outer_loop("o", "outer"), "        out[o] = (long long)scratch;", "    }",
            "    return kiln_o1 - kiln_o0;"]
    params = ["long long outer", "long long inner", "void *scratch", "long long *out"]
    source = "\n".join([C.prelude, *C.function("kiln_fused", "long long", params, body), ""])
    fn = toolchain.build(source).kiln_fused
    fn.restype = ctypes.c_longlong
    fn.argtypes = [ctypes.c_longlong, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_void_p]
    outer, inner = 10, 30000
    shared = np.empty(inner, np.float64)
    out = np.zeros(outer, np.int64)
    assert fn(outer, inner, shared.ctypes.data, out.ctypes.data) == outer  # the threads' returns are summed
    first, second = int(out[0]), int(out[-1])
    assert out[:5].tolist() == [first] * 5 and out[5:].tolist() == [second] * 5  # one scratch row per thread
    assert abs(first - second) >= inner * 8 and first % 64 == 0 and second % 64 == 0
    parallel.set_kernel_threads(1)
    assert fn(outer, inner, shared.ctypes.data, out.ctypes.data) == outer
    assert out.tolist() == [shared.ctypes.data] * outer  # serially: the caller's scratch


@needs_openmp
def test_concurrent_callers_never_run_two_teams(team):
    x = _data((2048, 512), "float64", 9)
    w = np.ones(512)
    compiled = kiln.compile(lambda t, w: F.softmax(_layer_norm(t, w, None), -1), backend="cpu")
    want = None
    compiled(kiln.tensor(x), kiln.tensor(w))
    want = compiled(kiln.tensor(x), kiln.tensor(w)).numpy().copy()
    errors: list[BaseException] = []

    def work():
        try:
            for _ in range(4):
                assert_bitwise(compiled(kiln.tensor(x), kiln.tensor(w)).numpy(), want, "concurrent")
                assert parallel.TEAM[0] in (0, 1) and parallel.last_team_size() <= 2
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert parallel.TEAM[0] == 0, "the team flag was left held"


def test_without_openmp_kernels_build_serially_with_one_debug_note(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(toolchain, "OPENMP_FLAG", "-fkiln-no-such-openmp-flag")  # the probe build fails
    cpu._reset_state()
    threads = parallel.kernel_threads()
    parallel.set_kernel_threads(2)
    try:
        with caplog.at_level(logging.DEBUG, logger="kiln.jit"):
            assert cpu.available()
            command = toolchain.compiler_command()
            assert toolchain.openmp_flags(command) == []
            x, b = _data((4, 100000), "float32", 10), _data((4, 100000), "float32", 11)
            compiled = kiln.compile(_chain, backend="cpu")
            before = parallel.teams_run()
            for _ in range(2):
                got = compiled(kiln.tensor(x), kiln.tensor(b)).numpy()
            assert parallel.teams_run() == before, "a kernel built without OpenMP started a team"
            assert_bitwise(got, _chain(kiln.tensor(x), kiln.tensor(b)).numpy(), "serial build vs eager")
        notes = [r for r in caplog.records if "OpenMP" in r.getMessage()]
        assert len(notes) == 1 and notes[0].levelno == logging.DEBUG
        key_without = toolchain.kernel_key("int kiln_fused;", command)
        toolchain._openmp[tuple(command)] = True
        assert toolchain.kernel_key("int kiln_fused;", command) != key_without  # OpenMP is part of the key
    finally:
        parallel.set_kernel_threads(threads)
        monkeypatch.undo()
        cpu._reset_state()


def test_thread_settings_are_validated():
    with pytest.raises(ValueError, match="whole number >= 1"):
        parallel.set_kernel_threads(0)
    with pytest.raises(ValueError, match=">= 0"):
        parallel.set_min_elements(-1)
    assert parallel.available_cpus() >= 1


@needs_openmp
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork()")
# (JAX, when an earlier test in this process imported it, warns about any fork; this test forks on purpose)
@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
def test_a_forked_child_runs_kernels_serially_and_finishes(team):
    x = _data((512, 1024), "float32", 12)
    compiled = kiln.compile(_chain, backend="cpu")
    for _ in range(2):
        want = compiled(kiln.tensor(x), kiln.tensor(x)).numpy().copy()  # the parent's team exists now
    assert parallel.last_team_size() == 2
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the kernel finishes, serially, with the parent's bits
        code = 1
        try:
            got = compiled(kiln.tensor(x), kiln.tensor(x)).numpy()
            code = 0 if parallel.kernel_threads() == 1 and np.array_equal(got, want, equal_nan=True) else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("a forked child hung in a kernel")


def test_kernels_stay_serial_when_another_libgomp_set_the_wait_policy(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    cpu._reset_state()
    monkeypatch.setattr(toolchain, "_runtime_prepared", [False])  # as if PyTorch's libgomp had loaded first
    threads = parallel.kernel_threads()
    parallel.set_kernel_threads(2)
    try:
        x = _data((4, 100000), "float32", 13)
        compiled = kiln.compile(_chain, backend="cpu")
        before = parallel.teams_run()
        for _ in range(2):
            got = compiled(kiln.tensor(x), kiln.tensor(x)).numpy()
        assert parallel.teams_run() == before
        assert_bitwise(got, _chain(kiln.tensor(x), kiln.tensor(x)).numpy(), "serial vs eager")
    finally:
        parallel.set_kernel_threads(threads)
        cpu._reset_state()


def test_a_bad_thread_setting_warns_instead_of_breaking_import() -> None:
    code = ("import warnings; warnings.simplefilter('always')\n"
            "from kiln.jit.backends.cpu import parallel\n"
            "print(parallel.TEAM[1] == parallel.available_cpus())")
    env = {**os.environ, "KILN_NUM_THREADS": "lots"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "True"
    assert "ignoring $KILN_NUM_THREADS='lots'" in run.stderr


@needs_openmp
def test_a_plan_with_gemms_on_a_threaded_blas_keeps_its_kernels_serial(team, monkeypatch):
    """After a GEMM, a multi-threaded OpenBLAS's workers spin on the other cores: a native plan with a
    matmul builds its kernels serial there (same results), and one without a matmul still uses teams. Where
    OpenBLAS runs its threads on kiln's team (blas_team.py), nothing spins, and both plans use teams."""
    from kiln.jit.backends.cpu import blas, segcode

    monkeypatch.setattr(cpu, "NATIVE_RUNTIME", True)
    x = kiln.tensor(_data((1024, 512), "float32", 5))
    w = kiln.tensor(_data((512, 512), "float32", 6))
    for threads, shared, gemm_plan_serial in ((2, False, True), (2, True, False), (1, False, False)):
        monkeypatch.setattr(segcode, "blas_threads", lambda n=threads: n)
        monkeypatch.setattr(segcode.blas_team, "share", lambda wait=True, shared=shared: shared)
        with_gemm = kiln.compile(lambda x, w: ((x @ w) * 1.5).relu() - x, backend="cpu")
        without = kiln.compile(lambda x: (x * 1.5).relu() - x, backend="cpu")
        for fn, args in ((with_gemm, (x, w)), (without, (x,))):
            fn(*args)
            before = parallel.teams_run()
            got = fn(*args)
            ran = parallel.teams_run() - before
            serial_expected = gemm_plan_serial and fn is with_gemm
            assert (ran == 0) == serial_expected, (threads, fn is with_gemm, ran)
        assert_bitwise(got.numpy(), ((x * 1.5).relu() - x).numpy(), "a teamed kernel vs eager")
    assert blas.blas_threads() >= 1


@needs_openmp
def test_a_plan_whose_gemms_are_too_small_to_thread_keeps_its_teams(team, monkeypatch):
    """A classifier head's GEMM (32 x 512 x 10) runs on one OpenBLAS thread, so nothing spins after it:
    the plan's large elementwise kernels still run on teams."""
    from kiln.jit.backends.cpu import segcode

    monkeypatch.setattr(cpu, "NATIVE_RUNTIME", True)
    monkeypatch.setattr(segcode, "blas_threads", lambda: 2)
    monkeypatch.setattr(segcode.blas_team, "share", lambda wait=True: False)
    x = kiln.tensor(_data((32, 512), "float32", 7))
    w = kiln.tensor(_data((512, 10), "float32", 8))
    big = kiln.tensor(_data((1024, 512), "float32", 9))
    assert 32 * 512 * 10 < segcode.BLAS_THREADED_WORK <= 1024 * 512 * 10
    fn = kiln.compile(lambda x, w, big: ((x @ w).sum() + (big * 1.5).relu()) - big, backend="cpu")
    fn(x, w, big)
    before = parallel.teams_run()
    got = fn(x, w, big)
    assert parallel.teams_run() > before
    assert_bitwise(got.numpy(), (((x @ w).sum() + (big * 1.5).relu()) - big).numpy(), "a teamed plan vs eager")


def _neg_kernel(size: int):
    from kiln.jit.backends.render.kernel_ir import Compute, Kernel, Load, Loop, Param, Store
    from kiln.ops.primitive import REGISTRY

    body = (Load("x", "float32", "in0", "o * inner + j"), Compute("y", "float32", REGISTRY["neg"], ("x",)),
            Store("out", "o * inner + j", "y"))
    return Kernel("neg", "elementwise", (Param("out", "float32", size, written=True), Param("in0", "float32", size)),
                  (Loop("o", "outer", "parallel", (Loop("j", "inner", "vector", body),)),))


def test_a_kernel_known_to_stay_below_the_team_threshold_compiles_without_an_openmp_region():
    """The C compiler spends more on each OpenMP region than on the kernel: an LSTM plan of 563 small kernels
    compiled in 6.9 s with them and 2.0 s without. Sizes unknown (0) or at the threshold keep the region."""
    from kiln.jit.backends.render.c_kernels import render_c

    assert "omp parallel" not in render_c(_neg_kernel(1000), "k", team_min=4096)
    assert "omp parallel" in render_c(_neg_kernel(4096), "k", team_min=4096)
    assert "omp parallel" in render_c(_neg_kernel(0), "k", team_min=4096)
    assert "omp parallel" in render_c(_neg_kernel(1000), "k")


def test_fused_groups_render_with_the_threshold_unless_a_size_is_symbolic():
    from kiln.jit.ir import Node, Value
    from kiln.jit.symbolic import Expr, SymInt
    from kiln.ops.primitive import REGISTRY

    f32 = kiln.float32
    static = Node(REGISTRY["neg"], [Value((4, 5), f32)], {}, Value((4, 5), f32))
    assert parallel.team_min_for([static]) == parallel.min_elements()
    b = SymInt(4, Expr.sym("B"))
    symbolic = Node(REGISTRY["neg"], [Value((b, 5), f32)], {}, Value((b, 5), f32))
    assert parallel.team_min_for([static, symbolic]) == 0


@needs_openmp
def test_small_kernels_of_a_plan_run_serially_and_large_ones_on_a_team(team, monkeypatch):
    monkeypatch.setattr(cpu, "NATIVE_RUNTIME", True)
    small, large = kiln.tensor(_data((8, 16), "float32", 11)), kiln.tensor(_data((1024, 512), "float32", 12))
    fn = kiln.compile(lambda s, b: ((s * 1.5).relu() - s, (b * 1.5).relu() - b), backend="cpu")
    fn(small, large)
    before = parallel.teams_run()
    got_small, got_large = fn(small, large)
    assert parallel.teams_run() == before + 1  # the large group's kernel only
    assert_bitwise(got_small.numpy(), ((small * 1.5).relu() - small).numpy(), "a serial-only kernel vs eager")
    assert_bitwise(got_large.numpy(), ((large * 1.5).relu() - large).numpy(), "a teamed kernel vs eager")
