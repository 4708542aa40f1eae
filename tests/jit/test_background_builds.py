"""Background builds (kiln/jit/backends/cpu/background.py): the C compiler runs in a worker thread while
the calls that need its code run in Python.

The oracle is eager kiln: every call, before the code is ready, while it is being loaded and after,
gives eager's bits, parameter updates included (the workloads have no float32 transcendental, which
generated code computes within a few ulp of NumPy instead). Builds are held back on an Event, so which calls ran
in Python is certain, not a matter of timing.
"""
from __future__ import annotations

import os
import sys
import threading
import warnings

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.jit.backends.cpu as cpu_backend
from kiln.jit.backends.cpu import background, codegen, elementwise_groups, rowcode, runtime, toolchain
from native_helpers import native_cache, needs_native  # noqa: F401 - native_cache: an autouse fixture

pytestmark = needs_native


@pytest.fixture(autouse=True)
def in_background():
    """Background builds on (beside native_cache's empty kernel cache, and every plan made eagerly)."""
    previous = kiln.jit.set_background_builds(True)
    yield
    kiln.jit.set_background_builds(previous)
    background.wait_for_builds(60)


@pytest.fixture
def held_builds(monkeypatch):
    """Builds in worker threads wait for the returned Event; builds on the test's thread do not."""
    release = threading.Event()
    real_build = toolchain.build

    def build(source, symbol=None, low_priority=False):
        if threading.current_thread() is not threading.main_thread():
            assert release.wait(60), "the test never released the builds"
        return real_build(source, symbol, low_priority)

    monkeypatch.setattr(toolchain, "build", build)
    yield release
    release.set()


def _models():
    kiln.manual_seed(3)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4))
    twin = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4))
    twin.load_state_dict(model.state_dict())
    return model, twin


def _step(forward, model, opt, x):
    opt.zero_grad()
    loss = forward(x).square().mean()
    loss.backward()
    opt.step()
    return loss.item()


def _assert_same_parameters(model, twin, when):
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert np.array_equal(p.detach().numpy(), q.detach().numpy()), f"{name} differs from eager {when}"


def test_a_training_loop_gives_eager_bits_before_during_and_after_the_build(held_builds):
    model, twin = _models()
    compiled = kiln.compile(model)
    opt, twin_opt = kiln.optim.SGD(model.parameters(), lr=0.1), kiln.optim.SGD(twin.parameters(), lr=0.1)
    xs = [kiln.randn(8, 12) for _ in range(6)]
    for k, x in enumerate(xs[:3]):  # the trace, then two calls whose code is still compiling
        assert _step(compiled, model, opt, x) == _step(twin, twin, twin_opt, x)
        _assert_same_parameters(model, twin, f"at step {k} (code still compiling)")
    entry = compiled.cache_entries[0]
    forward, backward = entry.forward_plan, entry.backward_plan
    assert isinstance(forward, runtime.NativePlan) and isinstance(backward, runtime.NativePlan)
    assert forward.building_calls == backward.building_calls == 2
    assert forward.variants[0].run is None, "the forward's code was loaded before its build was released"
    assert not kiln.jit.wait_for_builds(0.05), "a build finished while it was held"

    held_builds.set()
    assert kiln.jit.wait_for_builds(60)
    for k, x in enumerate(xs[3:], 3):
        assert _step(compiled, model, opt, x) == _step(twin, twin, twin_opt, x)
        _assert_same_parameters(model, twin, f"at step {k} (native code)")
    assert forward.building_calls == backward.building_calls == 2, "a call after the build ran in Python"
    assert forward.fallback_calls == backward.fallback_calls == 0
    assert forward.variants[0].run is not None and "kiln_segment_0" in forward.source


def test_the_source_waits_for_the_build(held_builds):
    compiled = kiln.compile(lambda a, b: (a * b + 1.0).relu())
    a, b = kiln.randn(5, 7), kiln.randn(5, 7)
    compiled(a, b)
    plan = compiled.cache_entries[0].plan
    assert not plan.variants, "the code of a plan no call has replayed yet was generated"
    threading.Timer(0.2, held_builds.set).start()
    assert "kiln_segment_0" in plan.source  # blocks until the timer releases the build
    assert plan.variants[0].run is not None
    assert np.array_equal(compiled(a, b).numpy(), (a * b + 1.0).relu().numpy())
    assert plan.building_calls == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_process_forked_during_a_build_builds_again_instead_of_waiting_forever(held_builds):
    """The worker thread stays in the parent: a child (a DataLoader worker, say) that needs the code
    starts the build again, and `wait_for_builds` there does not wait on a thread it lacks."""
    f = lambda a, b: (a - b).relu() * 2.0  # noqa: E731
    compiled = kiln.compile(f)
    a, b = kiln.randn(4, 6), kiln.randn(4, 6)
    with kiln.no_grad():
        compiled(a, b)
        compiled(a, b)  # its build starts, and is held
        plan = compiled.cache_entries[0].plan
        assert plan.building_calls == 1
        pid = os.fork()
        if pid == 0:  # the child: report through the exit status, never return into pytest
            status = 1
            try:
                held_builds.set()  # (the child's copy of the Event)
                want = f(a, b).numpy()
                same = np.array_equal(compiled(a, b).numpy(), want)
                ok = kiln.jit.wait_for_builds(60) and np.array_equal(compiled(a, b).numpy(), want)
                status = 0 if same and ok and plan.variants[0].run is not None else 2
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the child failed ({status})"
        assert plan.variants[0].run is None, "the parent's build finished while it was held"
        held_builds.set()
        assert kiln.jit.wait_for_builds(60)
        assert np.array_equal(compiled(a, b).numpy(), f(a, b).numpy()) and plan.variants[0].run is not None


def _rows_over_a_sum(x):  # (no transcendental: generated code equals NumPy bit for bit)
    y = (x * 2.0 + 1.0).relu()
    return y / (y.sum(-1, keepdim=True) + 1.0)


def test_a_plan_for_every_size_runs_in_python_until_its_code_is_built(held_builds):
    """A native plan with symbolic sizes renders its code when it is made, builds it in the background, and runs
    its calls through NumPy meanwhile, at every size."""
    compiled = kiln.compile(_rows_over_a_sum, dynamic_dims={0: {0: "B"}})
    with kiln.no_grad():
        for rows in (3, 5, 9):  # the trace, then replays while the build is held
            x = kiln.randn(rows, 3000)
            assert np.array_equal(compiled(x).numpy(), _rows_over_a_sum(x).numpy()), rows
        plan = compiled.cache_entries[0].plan
        assert isinstance(plan, runtime.NativePlan) and plan.size_guards is not None
        assert plan.building_calls == 2 and plan.variants[0].run is None
        held_builds.set()
        assert kiln.jit.wait_for_builds(60)
        for rows in (4, 11):
            x = kiln.randn(rows, 3000)
            assert np.array_equal(compiled(x).numpy(), _rows_over_a_sum(x).numpy()), rows
        assert plan.building_calls == 2 and plan.fallback_calls == 0 and plan.variants[0].run is not None


def test_a_symbolic_python_replay_evaluates_its_groups_until_their_kernels_are_built(held_builds, monkeypatch):
    """The Python replay of a symbolic plan (the reference of a native one) builds its fused kernels in the
    background too."""
    monkeypatch.setattr(cpu_backend, "NATIVE_RUNTIME", False)
    f = _rows_over_a_sum
    compiled = kiln.compile(f, dynamic_dims={0: {0: "B"}})
    with kiln.no_grad():
        for rows in (3, 5, 9):  # the trace, then replays while every kernel is held
            x = kiln.randn(rows, 3000)
            assert np.array_equal(compiled(x).numpy(), f(x).numpy()), rows
        fused = [n.prim for n in compiled.cache_entries[0].plan.graph.nodes
                 if isinstance(n.prim, (codegen.FusedElementwise, rowcode.RowKernel))]
        assert fused and all(prim._fn is None for prim in fused)
        assert all(getattr(prim, "fallbacks", 0) == 0 for prim in fused), "waiting for a build is not a fallback"
        held_builds.set()
        assert kiln.jit.wait_for_builds(60)
        for rows in (4, 11):
            x = kiln.randn(rows, 3000)
            assert np.array_equal(compiled(x).numpy(), f(x).numpy()), rows
        assert all(prim._fn is not None for prim in fused), "a kernel still evaluates after its build"


def test_a_build_that_fails_in_the_background_warns_and_the_plan_runs_in_python(monkeypatch):
    release = threading.Event()

    def broken(source, symbol=None, low_priority=False):
        assert release.wait(60)
        raise toolchain.CompilerUnavailable("the compiler went away")

    monkeypatch.setattr(toolchain, "build", broken)
    f = lambda a: (a * 3.0 - 1.0).sigmoid()  # noqa: E731
    compiled = kiln.compile(f)
    a = kiln.randn(6, 4)
    with kiln.no_grad():
        compiled(a)  # the trace
        assert np.array_equal(compiled(a).numpy(), f(a).numpy())  # the build starts; this call runs in Python
        plan = compiled.cache_entries[0].plan
        assert plan.building_calls == 1
        release.set()
        assert kiln.jit.wait_for_builds(60)
        with pytest.warns(RuntimeWarning, match="could not generate code for a plan"):
            got = compiled(a)
        assert np.array_equal(got.numpy(), f(a).numpy())
        assert np.array_equal(compiled(a).numpy(), f(a).numpy())
    assert not plan.variants and plan.fallback_calls == 2
    assert plan.segments == 0
    with pytest.raises(RuntimeError, match="no generated code"):
        plan.current  # noqa: B018


def test_a_symbolic_kernel_whose_build_fails_warns_once_and_evaluates(monkeypatch):
    def broken(source, symbol=None, low_priority=False):
        raise toolchain.CompilerUnavailable("the compiler went away")

    monkeypatch.setattr(toolchain, "build", broken)
    monkeypatch.setattr(cpu_backend, "NATIVE_RUNTIME", False)  # (the Python replay's kernels)
    monkeypatch.setattr(background, "_warned_failed", False)
    f = lambda x: (x * 2.0).exp() + 1.0  # noqa: E731
    compiled = kiln.compile(f, dynamic_dims={0: {0: "B"}})
    with kiln.no_grad():
        compiled(kiln.randn(3, 3000))  # (groups this large are fused)
        assert kiln.jit.wait_for_builds(60)
        with pytest.warns(RuntimeWarning, match="failed to build in the background"):
            x = kiln.randn(4, 3000)
            assert np.array_equal(compiled(x).numpy(), f(x).numpy())
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            x = kiln.randn(7, 3000)
            assert np.array_equal(compiled(x).numpy(), f(x).numpy())
    fused = [n.prim for n in compiled.cache_entries[0].plan.graph.nodes if isinstance(n.prim, codegen.FusedElementwise)]
    assert fused and all(prim._fn is None for prim in fused)


def test_a_cached_library_is_loaded_at_once_without_the_compiler(monkeypatch):
    f = lambda a: (a + 2.0).relu() * a  # noqa: E731
    a = kiln.randn(3, 3)
    kiln.jit.set_background_builds(False)
    kiln.compile(f)(a)  # builds the library into the (fresh) cache
    kiln.jit.set_background_builds(True)
    toolchain._reset_state()  # a new process: the cache on disk, nothing loaded
    assert toolchain.compiler_problem() is None  # (its probes may build)

    def no_compiler(*args, **kwargs):
        raise AssertionError("the compiler ran for a library the cache holds")

    monkeypatch.setattr(toolchain, "_compile", no_compiler)
    compiled = kiln.compile(f)
    compiled(a)
    assert np.array_equal(compiled(a).numpy(), f(a).numpy())  # the first replay loads the library and runs it
    plan = compiled.cache_entries[0].plan
    assert plan.variants[0].run is not None and plan.variants[0].pending is None and plan.building_calls == 0


def test_cached_never_compiles_and_build_fills_it():
    source = codegen.PRELUDE + "\nint kiln_background_probe(void) { return 7; }\n"
    assert toolchain.cached(source, "kiln_background_probe") is None
    lib = toolchain.build(source, "kiln_background_probe")
    assert toolchain.cached(source, "kiln_background_probe") is lib and lib.kiln_background_probe() == 7


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no process priorities here")
def test_a_background_compiler_runs_at_the_lowest_priority_in_this_session():
    script = "import os, time; time.sleep(0.3); print(os.nice(0), os.getsid(0), os.getpgid(0), os.getpid())"
    niceness, session, group, pid = map(int, toolchain._run([sys.executable, "-c", script], 30,
                                                            low_priority=True).stdout.split())
    assert niceness == max(toolchain.LOW_PRIORITY, os.nice(0))
    assert group == pid, "the compiler is not in a process group of its own (a timeout could not kill it all)"
    if sys.version_info >= (3, 11):  # (3.10 has no way to make a group without a session)
        assert session == os.getsid(0), "a new session gets a CPU share of its own, whatever its priority"
    assert int(toolchain._run([sys.executable, "-c", script], 30).stdout.split()[0]) == os.nice(0)


def test_the_switches_check_their_arguments():
    with pytest.raises(TypeError, match="True or False"):
        kiln.jit.set_background_builds(1)
    with pytest.raises(ValueError, match="timeout"):
        kiln.jit.wait_for_builds(-1)
    assert kiln.jit.background_builds() is True
    assert kiln.jit.wait_for_builds() is True


def test_a_symbolic_plans_kernels_share_one_library_with_each_distinct_kernel_once(monkeypatch):
    """A Python replay's kernels build as one library (cpu/kernel_library.py): one compiler run, and a
    group that appears twice (each layer of a model) compiles once."""
    monkeypatch.setattr(cpu_backend, "NATIVE_RUNTIME", False)
    kiln.jit.set_background_builds(False)
    built = []
    real_build = toolchain.build
    monkeypatch.setattr(toolchain, "build", lambda source, *a, **k: built.append(source) or real_build(source, *a, **k))

    monkeypatch.setattr(elementwise_groups, "MIN_ELEMENTS", 1)  # (groups this small are fused too)

    def f(x, w):  # the same group twice, a matmul between them, and a row kernel
        a = (x * 2.0 + 1.0).relu() @ w
        return (a * 2.0 + 1.0).relu(), (x * x).sum(-1)

    compiled = kiln.compile(f, dynamic_dims={0: {0: "B"}})
    w = kiln.randn(16, 16)
    with kiln.no_grad():
        for rows in (3, 5):
            x = kiln.randn(rows, 16)
            for got, want in zip(compiled(x, w), f(x, w)):
                assert np.array_equal(got.numpy(), want.numpy()), rows
    kernels = [n.prim for n in compiled.cache_entries[0].plan.graph.nodes
               if isinstance(n.prim, (codegen.FusedElementwise, rowcode.RowKernel))]
    assert len(kernels) >= 3 and all(k._fn is not None for k in kernels), kernels
    libraries = [source for source in built if "fused kernel(s)" in source]
    assert len(libraries) == 1, "the kernels were not built as one library"
    symbols = {k._compiled._symbol for k in kernels}
    assert len(symbols) == len(kernels) - 1, f"the repeated group was not compiled once: {symbols}"
    assert all(f"kiln_kernel_{i}(" in libraries[0] for i in range(len(symbols)))


def test_an_optimizer_steps_in_numpy_while_its_kernel_builds_with_the_same_bits(held_builds, monkeypatch):
    """The eager optimizer's native kernel (kiln/optim/native_kernel.py) builds in the background too: the
    steps before it is ready take the NumPy path, which gives the kernel's bits."""
    from kiln.optim import native_kernel

    monkeypatch.setattr(native_kernel, "_kernels", {})  # as in a new process: no kernel loaded yet
    monkeypatch.setattr(native_kernel, "_building", {})
    monkeypatch.setattr(toolchain, "_loaded", {})
    kiln.manual_seed(5)
    model = nn.Sequential(nn.Linear(7, 9), nn.ReLU(), nn.Linear(9, 3))
    twin = nn.Sequential(nn.Linear(7, 9), nn.ReLU(), nn.Linear(9, 3))
    twin.load_state_dict(model.state_dict())
    options = dict(lr=0.05, momentum=0.8125, dampening=0.0625, weight_decay=0.015625)
    opt = kiln.optim.SGD(model.parameters(), **options)
    numpy_opt = kiln.optim.SGD(twin.parameters(), fused=False, **options)
    rule = opt._native_rule

    def steps(count):
        for _ in range(count):
            x = kiln.randn(5, 7)
            _step(model, model, opt, x)
            _step(twin, twin, numpy_opt, x)
            _assert_same_parameters(model, twin, "after a step")
            for p, q in zip(model.parameters(), twin.parameters()):
                assert np.array_equal(opt.state[p]["momentum_buffer"].numpy(),
                                      numpy_opt.state[q]["momentum_buffer"].numpy())

    steps(2)  # the kernel is held: both steps ran in NumPy
    assert not any(key[0] is rule for key in native_kernel._kernels), "the kernel was loaded while held"
    held_builds.set()
    assert kiln.jit.wait_for_builds(60)
    steps(2)
    assert any(key[0] is rule for key in native_kernel._kernels), "the kernel never took over"
