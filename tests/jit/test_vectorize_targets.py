"""Every vector loop of the representative workloads' plans vectorizes on every target.

The plans' C (generated here, for this machine) is compiled for x86-64-v3 (AVX2) and
x86-64-v4 (AVX-512) with GCC, x86-64-v3 with clang, aarch64 with GCC (armv8.2-a NEON, and
a Neoverse V1 with SVE) and aarch64 with clang (armv8.2-a NEON, as Apple silicon), without ``-fno-trapping-math``, and each compiler's vectorizer report
must show every loop the renderers marked as a vector loop vectorized
(kiln/jit/backends/cpu/vector_report.py). A target whose compiler is missing skips, naming the
Debian package (.ci/run installs them). The last test shows the check failing on a loop made
scalar: a transcendental's final select spelled as a C ternary, as it was before.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from build_cache import cached_build
from kiln.jit.backends.cpu import vector_report
from kiln.jit.backends.cpu.vector_report import TARGETS
from native_helpers import needs_native
from vector_workloads import WORKLOADS

pytestmark = [needs_native, pytest.mark.slow]


@pytest.fixture(scope="module")
def sources() -> dict[str, list[str]]:
    """Each workload's plan sources, generated once for the module (kernels built before load from the cache:
    the plans hold their sources either way)."""
    from kiln.jit.backends import cpu  # noqa: PLC0415
    from kiln.jit.backends.cpu import runtime  # noqa: PLC0415

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu, "NATIVE_RUNTIME", True)
        runtime._made.clear()
        return {name: build() for name, build in WORKLOADS.items()}


def _compile_report(source: str, target: vector_report.CrossTarget, folder: Path) -> vector_report.Report:
    """vector_report.compile_report, its compiler's output reused from an identical earlier build
    (tests/build_cache.py): the report depends on nothing but the compiler, its flags and the source."""
    out = folder / "report.txt"
    flags = target.command(Path(vector_report.SOURCE_NAME), Path("plan.o"))[1:]
    cached_build(shutil.which(target.compiler), flags, source, [out],
                 lambda: out.write_text(vector_report.compile_report(source, target).output))
    return vector_report.read_report(source, target, out.read_text())


def _available(target: vector_report.CrossTarget) -> None:
    missing = target.missing()
    if missing:
        pytest.skip(f"{target.name}: {missing}")


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_every_vector_loop_vectorizes(sources, target, tmp_path):
    _available(target)
    failures, checked = [], 0
    for workload, plan_sources in sources.items():
        for source in plan_sources:
            report = _compile_report(source, target, tmp_path)
            checked += len(report.vector_loops)
            if report.scalar:
                failures.append(f"{workload}: {len(report.scalar)} of {len(report.vector_loops)} vector loops "
                                f"left scalar by {target.name}:\n{report.describe_scalar(source)}")
    assert checked >= 50, f"expected the workloads' plans to hold many vector loops, found {checked}"
    assert not failures, "\n".join(failures)


def test_every_workload_has_vector_loops(sources):
    for workload, plan_sources in sources.items():
        assert plan_sources and sum(len(vector_report.vector_loops(s)) for s in plan_sources) > 0, workload


# tanh's clamp and last select as C ternaries, as they were spelled before kiln_selectf
BRANCHY_TANH = {"a = kiln_selectf(a < 9.2f, a, 9.2f);": "a = a < 9.2f ? a : 9.2f;",
                "return kiln_selectf(x != x, x, y);": "return x != x ? x : y;"}


@pytest.mark.parametrize("target", [t for t in TARGETS if t.name.startswith("gcc x86-64-v3")],
                         ids=lambda t: t.name)
def test_the_check_fails_on_a_loop_made_scalar(sources, target):
    """tanh's selects spelled as ternaries (as before): GCC keeps the LayerNorm+GELU loop scalar on AVX2."""
    _available(target)
    (source,) = [s for s in sources["LayerNorm+GELU"] if "kiln_tanhf(" in s]
    tanh = source[source.index("KILN_INLINE float kiln_tanhf"):]
    tanh = tanh[:tanh.index("\n}\n")]
    branchy = tanh
    for select, ternary in BRANCHY_TANH.items():
        assert select in branchy
        branchy = branchy.replace(select, ternary)
    broken = source.replace(tanh, branchy)
    assert vector_report.compile_report(source, target).scalar == []
    scalar = vector_report.compile_report(broken, target).scalar
    assert scalar, "the check did not notice the loop calling tanh left scalar"
    assert all("kiln_tanhf" in s for s in _loop_bodies(broken, scalar))


def _loop_bodies(source: str, lines: list[int]) -> list[str]:
    text = source.splitlines()
    return ["\n".join(text[n - 1:n + 30]) for n in lines]
