"""Every elementwise loop of a native plan vectorizes, in-place state updates included.

A plan's C puts all of its kernels in one file; if the compiler inlines a kernel's loops
into the segment that calls it, the kernel's restrict pointers lose their meaning there,
and an in-place update (``buf = buf * momentum + grad``, with ``out`` and an input one
array) stays scalar and reloads the broadcast momentum on every element: the whole SGD
step of an MLP at batch 16 ran 2.1x slower that way. (Sizes here are large enough that no loop is
short enough for GCC to unroll it whole instead, which it reports differently.). GCC's vectorizer report must name
the inner loop of every elementwise kernel in the plan.
"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.jit.backends.cpu import toolchain
from native_helpers import native_cache, needs_native  # noqa: F401 - native_cache: an autouse fixture
from test_vector_math import X86
from whole_step_helpers import loss_of

pytestmark = needs_native


def _gcc() -> list[str]:
    command = toolchain.compiler_command()
    version = subprocess.run([*command, "--version"], capture_output=True, text=True).stdout
    if "clang" in version.lower() or ("gcc" not in version.lower() and "free software" not in version.lower()):
        pytest.skip("not GCC")
    return command


def _step_plan_source() -> str:
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64))  # (no loop short enough to unroll)
    opt = kiln.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-2)

    def train_step(x, y):
        opt.zero_grad()
        loss = loss_of(model, x, y)
        loss.backward()
        opt.step()
        return loss

    step = kiln.compile(train_step, backend="cpu")
    rng = np.random.default_rng(0)
    x, y = kiln.tensor(rng.standard_normal((64, 64)).astype(np.float32)), kiln.tensor(rng.integers(0, 64, 64))
    for _ in range(3):
        step(x, y)
    (entry,) = [e for e in step.cache_entries if getattr(e, "binding", None) is not None][-1:]
    return entry.plan.source


@pytest.mark.skipif(not X86, reason="GCC's vectorizer report is checked on x86")
def test_every_elementwise_loop_of_a_whole_step_plan_vectorizes(tmp_path):
    command = _gcc()
    source = _step_plan_source()
    lines = source.splitlines()
    # the inner loop of each elementwise kernel's range function (kiln_loop_*_range)
    loops: dict[int, str] = {}
    kernel = None
    for number, line in enumerate(lines, 1):
        match = re.search(r"\b(kiln_loop_\w+)_range\(", line)
        if match and line.rstrip().endswith("{"):
            kernel = match.group(1)
        elif kernel and "for (long long j" in line:
            loops[number] = kernel
            kernel = None
    in_place = [k for n, k in loops.items() if "out[o * inner + j]" in lines[n]]
    # (kernels that read alike are rendered once: the parameters' updates share theirs)
    assert len(loops) >= 4 and in_place, "expected the update's in-place kernels in the plan"
    src = tmp_path / "plan.c"
    src.write_text(source)
    # (-fno-ipa-icf: kernels with identical bodies would be folded into one and reported once)
    flags = [f for f in toolchain.FLAGS if f not in ("-shared", "-fPIC")] + [toolchain.OPENMP_FLAG, "-fno-ipa-icf"]
    out = subprocess.run([*command, *flags, "-c", str(src), "-o", str(tmp_path / "plan.o"),
                          "-fopt-info-vec-optimized", "-fopt-info-inline-optimized"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    vectorized = {int(m.group(1)) for m in re.finditer(r"plan\.c:(\d+):\d+: optimized: loop vectorized", out.stderr)}
    missing = sorted(k for n, k in loops.items() if n not in vectorized)
    assert not missing, f"these kernels' loops were not vectorized: {missing}\n{out.stderr}"
    # a vectorized copy is not enough: inlined (into the kernel's wrapper, and that into the segment),
    # a copy of the loops loses restrict and runs scalar; the loops must stay one function
    inlined = sorted(set(re.findall(r"Inlining (kiln_\w+_range)/", out.stderr)))
    assert not inlined, f"kernel loops inlined, where they lose restrict: {inlined}"
