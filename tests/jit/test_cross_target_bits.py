"""A run on Arm: kiln's generated float32 kernels give the same bits on every target with FMA.

The one-node fused kernels of the five float32 transcendentals (kiln/jit/backends/render/vecmath.py)
and of `maximum` (a select on bit patterns) are generated here, exactly as kiln renders them, and
linked with a small `main` into one standalone program per target, built with kiln's own flags
(toolchain.FLAGS with the target's -march, less the shared-library flags; on aarch64 also less
the x86 vector-width preference):

* x86-64-v3 (AVX2 and FMA) and x86-64-v4 (AVX-512), run natively where this CPU has them;
* aarch64 armv8.2-a (NEON), and armv8.2-a+sve at 128-bit and at 512-bit vectors, run under
  qemu-aarch64-static (the SVE code is vector-length agnostic: one build, any length);
* x86-64 (SSE2, no FMA), where KILN_MADD rounds twice.

The program reads float32 inputs from a file and writes every kernel's outputs to another. The
inputs are the ulp tests' dense grid (every 8191st bit pattern: both signs, every binade,
subnormals, infinities and NaNs with many payloads), their random values at several scales and
every pair of their special values (for `maximum`); the length is not a multiple of any vector
width, so the last values also take a loop's scalar epilogue.

1. The FMA builds agree bit for bit on every input: the uint32 views are compared, so a NaN must
   match in sign and payload too. Measured: they do, the input NaNs' many payloads included, so
   nothing is relaxed (a difference is reported in hex, NaN-against-NaN ones marked as such).
2. The build without FMA stays within FMA_CROSS_ULPS of them, the largest distance measured on
   these inputs and on a 32x denser grid (every 257th bit pattern, 17 million values) alike: erf,
   sigmoid and tanh 2 ulp, exp 1 ulp, log and maximum 0 (log's two-rounding build gave the same
   bits on every value tried). NaN, +-inf and +-0 (with its sign) are the same bits.
3. Every build is within F32_ULPS of NumPy, with NumPy's special values (test_vector_math.py).

The last test shows that the comparison of 1 finds a difference where there is one: it flags
the two-rounding build against an FMA build for every function whose bound above is not 0.
A target whose tools are missing skips, naming the Debian package that brings them.
"""
from __future__ import annotations

import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from test_vector_math import EDGES_F32, F32_ULPS, FUNCTIONS, dense_grid, exact_misses, numpy_of, random_values, ulps

from kiln.dtypes import get_dtype
from kiln.jit.backends.cpu import codegen, toolchain
from kiln.jit.backends.cpu.elementwise_groups import Group
from kiln.jit.ir import Node, Value
from kiln.ops.primitive import REGISTRY

KERNELS = [*FUNCTIONS, "maximum"]  # the transcendentals, and one select on two inputs
ARITY = {"maximum": 2}
FMA_CROSS_ULPS = {"erf": 2, "exp": 1, "log": 0, "sigmoid": 2, "tanh": 2, "maximum": 0}
RUN_TIMEOUT_S = 300.0
X86_HOST = platform.machine().lower() in ("x86_64", "amd64")
X86_V3_FLAGS = frozenset({"avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe"})
X86_V4_FLAGS = X86_V3_FLAGS | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
QEMU = "qemu-aarch64-static"


@dataclass(frozen=True)
class Target:
    """A compiler and -march to build the program with, and how to run it."""

    name: str
    compiler: str
    package: str  # the Debian package that brings the compiler
    march: str
    fused: bool = True  # whether KILN_MADD is one fmaf there
    cpu_flags: frozenset[str] = frozenset()  # x86 features this CPU needs to run the program natively
    runner: tuple[str, ...] = ()  # an emulator to run it under (empty: natively, on x86-64)

    @property
    def arm(self) -> bool:
        return self.compiler.startswith("aarch64")

    def flags(self) -> list[str]:
        """kiln's kernel flags for this target: its -march, no shared-library flags, static on aarch64."""
        drop = ("-march=", "-shared", "-fPIC") + (("-mprefer-vector-width",) if self.arm else ())
        kept = [f for f in toolchain.FLAGS if not f.startswith(drop)]
        return [f"-march={self.march}", *kept, *(["-static"] if self.arm else [])]

    def missing(self) -> str | None:
        """Why this target cannot be built and run here (None when it can)."""
        if shutil.which(self.compiler) is None:
            return f"{self.compiler} is not installed (Debian package {self.package})"
        if self.arm:
            if shutil.which(QEMU) is None:
                return f"{QEMU} is not installed (Debian package qemu-user-static)"
            libc = subprocess.run([self.compiler, "-print-file-name=libc.a"], capture_output=True, text=True)
            if not Path(libc.stdout.strip()).is_absolute():
                return "no static aarch64 C library (Debian package libc6-dev-arm64-cross)"
            return None
        if not X86_HOST:
            return f"runs natively on x86-64 only, this is {platform.machine()}"
        lacking = sorted(self.cpu_flags - cpu_flags())
        return f"this CPU lacks {', '.join(lacking)}" if lacking else None


TARGETS = [
    Target("x86-64-v3 (AVX2)", "gcc", "gcc", "x86-64-v3", cpu_flags=X86_V3_FLAGS),
    Target("x86-64-v4 (AVX-512)", "gcc", "gcc", "x86-64-v4", cpu_flags=X86_V4_FLAGS),
    Target("aarch64 (NEON)", "aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu", "armv8.2-a", runner=(QEMU,)),
    Target("aarch64 SVE-128", "aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu", "armv8.2-a+sve",
           runner=(QEMU, "-cpu", "max,sve-default-vector-length=16")),
    Target("aarch64 SVE-512", "aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu", "armv8.2-a+sve",
           runner=(QEMU, "-cpu", "max,sve-default-vector-length=64")),
    Target("x86-64 (no FMA)", "gcc", "gcc", "x86-64", fused=False),
]
FUSED = [t for t in TARGETS if t.fused]
(BASELINE,) = [t for t in TARGETS if not t.fused]


def cpu_flags() -> set[str]:
    """This CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return set(value.split())
    except OSError:
        pass
    return set()


def kernel_source(name: str, n: int) -> tuple[str, str]:
    """The generated C of `name` over n float32 values, and its kiln_fused's parameter list."""
    f32 = get_dtype("float32")
    node = Node(REGISTRY[name], [Value((n,), f32) for _ in range(ARITY.get(name, 1))], {}, Value((n,), f32))
    kernel = codegen.FusedElementwise(Group([node]))
    assert kernel.split == 0, "expected one row of n values (outer 1, inner n)"
    source = kernel.source
    (params,) = re.findall(rf"^void {toolchain.SYMBOL}\((.*)\) \{{$", source, re.M)
    ins = ", ".join(f"const float *restrict in{k}" for k in range(ARITY.get(name, 1)))
    assert params == f"long long outer, long long inner, float *restrict out, {ins}", params
    return source, params


def harness(signatures: dict[str, str], n: int) -> str:
    """A main that reads x then y (n float32 each) from argv[1] and writes each kernel's n outputs to argv[2]."""
    decls = "\n".join(f"void kiln_fused_{name}({params});" for name, params in signatures.items())
    calls = "\n".join(f"    kiln_fused_{name}(1, n, out + {k}LL * n, {'x, y' if ARITY.get(name, 1) == 2 else 'x'});"
                      for k, name in enumerate(signatures))
    k = len(signatures)
    return f"""#include <stdio.h>
#include <stdlib.h>
{decls}
int main(int argc, char **argv) {{
    const long long n = {n};
    float *x = malloc(8 * n), *y = x + n, *out = malloc(4 * n * {k});
    FILE *f = argc == 3 ? fopen(argv[1], "rb") : NULL;
    if (!x || !out || !f || fread(x, 4, 2 * n, f) != (size_t)(2 * n)) return 2;
    fclose(f);
{calls}
    f = fopen(argv[2], "wb");
    if (!f || fwrite(out, 4, {k} * n, f) != (size_t)({k} * n)) return 3;
    return fclose(f) != 0;
}}
"""


class Builds:
    """Each target's outputs (one row per kernel of KERNELS), built and run on first use."""

    def __init__(self, folder: Path, x: np.ndarray, y: np.ndarray):
        self.folder, self.x, self.y = folder, x, y
        self._outputs: dict[str, np.ndarray | str] = {}
        signatures = {}
        self.files = []
        for name in KERNELS:
            source, signatures[name] = kernel_source(name, x.size)
            path = folder / f"kernel_{name}.c"  # its own unit: every kernel defines kiln_fused and kiln_team
            path.write_text(f"#define kiln_fused kiln_fused_{name}\n#define kiln_team kiln_team_{name}\n{source}")
            self.files.append(path)
        self.files.append(folder / "main.c")
        self.files[-1].write_text(harness(signatures, x.size))
        self.inputs = folder / "inputs.bin"
        np.concatenate([x, y]).astype(np.float32).tofile(self.inputs)

    def status(self, target: Target) -> np.ndarray | str:
        """`target`'s outputs (one row per kernel), built and run once; or why it cannot run here."""
        if target.name not in self._outputs:
            self._outputs[target.name] = target.missing() or self._run(target)
        return self._outputs[target.name]

    def outputs(self, target: Target) -> dict[str, np.ndarray]:
        """Each kernel's outputs from `target`'s program (skips the test when the target cannot run here)."""
        got = self.status(target)
        if isinstance(got, str):
            pytest.skip(f"{target.name}: {got}")
        return dict(zip(KERNELS, got))

    def available(self, targets: list[Target]) -> list[Target]:
        """Those of `targets` that run here."""
        return [t for t in targets if not isinstance(self.status(t), str)]

    def why_not(self, targets: list[Target]) -> str:
        """Why those of `targets` that cannot run here cannot."""
        return "; ".join(f"{t.name}: {self.status(t)}" for t in targets if isinstance(self.status(t), str))

    def _run(self, target: Target) -> np.ndarray:
        stem = re.sub(r"\W+", "_", target.name)
        program, results = self.folder / stem, self.folder / f"{stem}.bin"
        built = subprocess.run([target.compiler, *target.flags(), *map(str, self.files), "-o", str(program), "-lm"],
                               capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        assert built.returncode == 0, f"{target.name}: the build failed:\n{built.stderr[-4000:]}"
        ran = subprocess.run([*target.runner, str(program), str(self.inputs), str(results)],
                             capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        assert ran.returncode == 0, f"{target.name}: the program exited with {ran.returncode}:\n{ran.stderr[-4000:]}"
        return np.fromfile(results, np.float32).reshape(len(KERNELS), self.x.size)


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> Builds:
    grid = np.concatenate([dense_grid(8191), random_values("float32")])
    edges = np.array(EDGES_F32, np.float32)
    x = np.concatenate([grid, np.repeat(edges, edges.size)])
    y = np.concatenate([np.random.default_rng(3).permutation(grid), np.tile(edges, edges.size)])
    assert x.size % 16, "the last values should take the scalar epilogue"
    return Builds(tmp_path_factory.mktemp("cross_target"), x, y)


def reference_of(name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """NumPy's result: the primitive's own kernel."""
    if ARITY.get(name, 1) == 2:
        with np.errstate(all="ignore"):
            return np.asarray(REGISTRY[name].kernel(np, x, y))
    return numpy_of(name, x)


def bit_differences(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """The indices where two float32 arrays differ in any bit (NaN sign and payload included)."""
    return np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))


def describe(x: np.ndarray, y: np.ndarray | None, got: np.ndarray, want: np.ndarray, where: np.ndarray) -> str:
    """Up to 8 of the differing values, in hex, with the inputs; NaN-against-NaN ones say so."""
    lines = []
    for i in where[:8]:
        inputs = f"x={x[i]!r} ({x[i].view(np.uint32):#010x})"
        if y is not None:
            inputs += f", y={y[i]!r} ({y[i].view(np.uint32):#010x})"
        payload = " (NaN payload or sign only)" if np.isnan(got[i]) and np.isnan(want[i]) else ""
        lines.append(f"  {inputs}: {got[i].view(np.uint32):#010x} vs {want[i].view(np.uint32):#010x}{payload}")
    return "\n".join(lines)


def second_input(builds: Builds, name: str) -> np.ndarray | None:
    return builds.y if ARITY.get(name, 1) == 2 else None


@pytest.mark.parametrize("name", KERNELS)
def test_fma_builds_give_the_same_bits(builds, name):
    targets = builds.available(FUSED)
    if len(targets) < 2:
        pytest.skip(f"fewer than two FMA targets can run here: {builds.why_not(FUSED)}")
    reference = builds.outputs(targets[0])[name]
    failures = []
    for target in targets[1:]:
        got = builds.outputs(target)[name]
        where = bit_differences(got, reference)
        if where.size:
            failures.append(f"{name}: {target.name} differs from {targets[0].name} on {where.size} of {got.size} "
                            f"inputs:\n{describe(builds.x, second_input(builds, name), got, reference, where)}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("name", KERNELS)
def test_the_build_without_fma_stays_within_fma_cross_ulps(builds, name):
    fused = builds.available(FUSED)
    if not fused:
        pytest.skip(f"no FMA target can run here: {builds.why_not(FUSED)}")
    got, want = builds.outputs(BASELINE)[name], builds.outputs(fused[0])[name]
    special = ~np.isfinite(want) | (want == 0) | ~np.isfinite(got) | (got == 0)
    where = np.flatnonzero(special)[bit_differences(got[special], want[special])]
    assert not where.size, (f"{name}: special values differ between {BASELINE.name} and {fused[0].name}:\n"
                            + describe(builds.x, second_input(builds, name), got, want, where))
    d = ulps(got, want)
    worst = int(np.argmax(d))
    assert d[worst] <= FMA_CROSS_ULPS[name], (
        f"{name}({builds.x[worst]!r}) = {got[worst]!r} without FMA but {want[worst]!r} with it: {d[worst]} ulp "
        f"(FMA_CROSS_ULPS allows {FMA_CROSS_ULPS[name]}); {int((d > FMA_CROSS_ULPS[name]).sum())} values over")


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_each_build_is_within_f32_ulps_of_numpy(builds, target):
    outputs = builds.outputs(target)
    for name in KERNELS:
        got, want = outputs[name], reference_of(name, builds.x, builds.y)
        allowed = 0 if name == "maximum" else F32_ULPS
        miss = np.flatnonzero(exact_misses(got, want))
        assert not miss.size, (f"{target.name}: {name}'s special values are not NumPy's:\n"
                               + describe(builds.x, second_input(builds, name), got, want, miss))
        d = ulps(got, want)
        worst = int(np.argmax(d))
        assert d[worst] <= allowed, (f"{target.name}: {name}({builds.x[worst]!r}) = {got[worst]!r} but NumPy gives "
                                     f"{want[worst]!r}: {d[worst]} ulp (allowed {allowed})")


def test_the_bit_comparison_finds_the_two_roundings(builds):
    """Without FMA the polynomials round twice: the exact comparison flags that build for every function
    with a nonzero FMA_CROSS_ULPS, and for no other."""
    fused = builds.available(FUSED)
    if not fused:
        pytest.skip(f"no FMA target can run here: {builds.why_not(FUSED)}")
    got, want = builds.outputs(BASELINE), builds.outputs(fused[0])
    flagged = {name for name in KERNELS if bit_differences(got[name], want[name]).size}
    assert flagged == {name for name, bound in FMA_CROSS_ULPS.items() if bound > 0}
