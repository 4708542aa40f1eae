"""Which generated loops vectorize on other targets: build kiln's C for them and read the reports.

kiln builds its kernels for the machine it runs on, but users' machines differ: AVX2 laptops,
AVX-512 servers, Arm with GCC (Graviton) or clang (Apple Silicon). A loop that vectorizes here
may stay scalar there, and nothing would show it. So the C of a plan is compiled (``-c`` only,
nothing runs) for each cross target with its compiler's vectorizer report on, and every loop the
renderers marked as a vector loop (the comment ``VECTOR_LOOP`` ends its opening line) that the
vectorizer gave up on ("not vectorized") must also be reported vectorized (in another copy of
it: a clone for constant arguments, a versioned loop). A marked loop the compiler removed before
vectorizing (a kernel called only on one element, whose loop is unrolled away) has no remark.

The cross builds leave out ``-fno-trapping-math``, which kiln's own builds add: the source must
vectorize without it (a select spelled on bit patterns, see render/vecmath.py): no single flag
is relied on.

    >>> report = compile_report(plan.source, TARGETS[0])        # doctest: +SKIP
    >>> report.scalar                                          # doctest: +SKIP
    []
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..render.c_kernels import VECTOR_LOOP

# what every cross build uses: kiln's flags (toolchain.FLAGS) less the target, the library flags
# and -fno-trapping-math (see the module docstring)
BASE_FLAGS = ("-O3", "-fno-math-errno", "-ffp-contract=off", "-std=c99")
X86_WIDTH = ("-mprefer-vector-width=256",)  # as toolchain.FLAGS on x86
TIMEOUT_S = 300.0


@dataclass(frozen=True)
class CrossTarget:
    """A compiler and target flags to build generated C for; `dialect` says how its reports read."""

    name: str
    compiler: str
    flags: tuple[str, ...]
    dialect: str  # "gcc" (-fopt-info) or "clang" (-Rpass)
    package: str  # the Debian package that brings the compiler
    openmp: bool = True  # build with -fopenmp, as kiln does (clang's omp.h needs libomp-dev: the loops do not)
    headers: str | None = None  # the target's C library headers, where they are not the compiler's own

    def missing(self) -> str | None:
        """Why this target cannot be built here (None when it can)."""
        if shutil.which(self.compiler) is None:
            return f"{self.compiler} is not installed (Debian package {self.package})"
        if self.headers is not None and not Path(self.headers).is_dir():
            return f"{self.headers} is missing (Debian package {CROSS_LIBC})"
        return None

    def command(self, source: Path, obj: Path) -> list[str]:
        report = (["-fopt-info-vec-optimized-missed", "-fno-ipa-icf"] if self.dialect == "gcc"
                  else ["-Rpass=loop-vectorize", "-Rpass-missed=loop-vectorize"])
        openmp = ["-fopenmp"] if self.openmp else []
        return [self.compiler, *BASE_FLAGS, *openmp, *self.flags, *report, "-c", str(source), "-o", str(obj)]


CROSS_LIBC = "libc6-dev-arm64-cross"  # aarch64 glibc headers, for clang's cross builds
TARGETS = [
    CrossTarget("gcc x86-64-v3 (AVX2)", "gcc", ("-march=x86-64-v3", *X86_WIDTH), "gcc", "gcc"),
    CrossTarget("gcc x86-64-v4 (AVX-512)", "gcc", ("-march=x86-64-v4", *X86_WIDTH), "gcc", "gcc"),
    CrossTarget("clang x86-64-v3 (AVX2)", "clang", ("-march=x86-64-v3", *X86_WIDTH), "clang", "clang",
                openmp=False),
    CrossTarget("gcc aarch64 armv8.2-a (NEON)", "aarch64-linux-gnu-gcc", ("-march=armv8.2-a",), "gcc",
                "gcc-aarch64-linux-gnu"),
    CrossTarget("gcc aarch64 Neoverse V1 (SVE)", "aarch64-linux-gnu-gcc", ("-mcpu=neoverse-v1",), "gcc",
                "gcc-aarch64-linux-gnu"),
    CrossTarget("clang aarch64 armv8.2-a (NEON, as on Apple silicon)", "clang",
                ("--target=aarch64-linux-gnu", "-march=armv8.2-a"), "clang", "clang", openmp=False,
                headers="/usr/aarch64-linux-gnu/include"),
]


@dataclass
class Report:
    """One build's verdict: the marked loops (source line numbers) and those left scalar."""

    target: CrossTarget
    vector_loops: list[int]
    scalar: list[int]
    output: str  # the compiler's report, for messages

    def describe_scalar(self, source: str) -> str:
        lines = source.splitlines()
        return "\n".join(f"  line {n}: {lines[n - 1].strip()}  (in {enclosing_function(lines, n)})"
                         for n in self.scalar)


def vector_loops(source: str) -> list[int]:
    """The 1-based line numbers of the loops the renderers marked as vector loops."""
    return [n for n, line in enumerate(source.splitlines(), 1) if line.rstrip().endswith(VECTOR_LOOP)]


def enclosing_function(lines: list[str], number: int) -> str:
    """The name of the C function whose body holds line `number` (best effort, for messages)."""
    for line in reversed(lines[:number]):
        match = re.match(r"^\S.*?\b(\w+)\([^;]*\)\s*\{\s*$", line)
        if match:
            return match.group(1)
    return "?"


# (vectorized, gave up) remarks at a loop's line, per report dialect
REMARKS = {"gcc": ("optimized: loop vectorized", "missed: couldn't vectorize loop"),
           "clang": ("remark: vectorized loop", "remark: loop not vectorized")}


def remarked_lines(output: str, filename: str, dialect: str) -> tuple[set[int], set[int]]:
    """The lines of loops the report says were vectorized, and of those it says were not."""
    found = []
    for remark in REMARKS[dialect]:
        pattern = rf"{re.escape(filename)}:(\d+):\d+: {re.escape(remark)}"
        found.append({int(m.group(1)) for m in re.finditer(pattern, output)})
    return found[0], found[1]


def compile_report(source: str, target: CrossTarget) -> Report:
    """Build `source` for `target` (object file only) and report its marked loops left scalar.

    Raises RuntimeError with the compiler's message when the build fails.
    """
    with tempfile.TemporaryDirectory(prefix="kiln-vec-") as folder:
        src, obj = Path(folder) / SOURCE_NAME, Path(folder) / "plan.o"
        src.write_text(source)
        result = subprocess.run(target.command(src, obj), capture_output=True, text=True, timeout=TIMEOUT_S)
    output = result.stderr + result.stdout
    if result.returncode != 0:
        raise RuntimeError(f"{target.name}: {target.compiler} failed (exit {result.returncode}):\n{output[-3000:]}")
    return read_report(source, target, output)


SOURCE_NAME = "plan.c"  # the file name compile_report builds `source` as, which its remarks cite


def read_report(source: str, target: CrossTarget, output: str) -> Report:
    """The Report of `target`'s compiler `output` on `source` (built as SOURCE_NAME)."""
    marked = vector_loops(source)
    vectorized, missed = remarked_lines(output, SOURCE_NAME, target.dialect)
    return Report(target, marked, [n for n in marked if n in missed and n not in vectorized], output)
