"""kiln's vectorized transcendentals (kiln/jit/backends/render/vecmath.py) against NumPy, in ulps.

Each function is built through the real toolchain as a one-node fused kernel (the code
fused groups and row kernels inline) and run on a dense float32 grid (every k-th bit
pattern, so every binade and both signs, subnormals included), on random values at several
scales, and on special values. float32 must be within 4 ulp of the primitive's NumPy
kernel (exp, log, tanh: NumPy's SIMD loops; erf: SciPy; sigmoid: the kernel's two branches
around NumPy's exp); NaN, +-inf, +-0 (with its sign) and the results at the overflow and
underflow edges must be NumPy's exactly. float64 is libm, within tolerances.C_EXPR_ULPS.
The FMA and the plain multiply-add builds of the same source both keep the bound.
"""
from __future__ import annotations

import platform
import subprocess

import numpy as np
import pytest
from tolerances import C_EXPR_ULPS

from kiln.dtypes import get_dtype
from kiln.jit.backends import cpu
from kiln.jit.backends.cpu import codegen, toolchain
from kiln.jit.backends.cpu.elementwise_groups import Group
from kiln.jit.backends.render import C
from kiln.jit.ir import Node, Value
from kiln.ops.elementwise import _erf_numpy
from kiln.ops.primitive import REGISTRY

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

FUNCTIONS = sorted(name for name, prim in REGISTRY.items() if prim.transcendental)
F32_ULPS = 4
X86 = platform.machine().lower() in ("x86_64", "amd64")

EDGES_F32 = [
    0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 0.5, -0.5, 2.0,
    88.72283, 88.722839, 88.7228394, 89.0, -87.33654, -87.336548, -103.27893, -103.972084, -103.972092, -104.0,
    -150.0, 1e-45, -1e-45, 1.1754942e-38, 1.1754944e-38, -1.1754944e-38, 3.4028235e38, -3.4028235e38,
    0.9999999, 1.0000001, 9.01, 9.2, -9.2, 3.83, 3.92, 4.0, -4.0, 0.99999994, 1e-20, -1e-20,
]


@pytest.fixture
def kernel_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    return tmp_path


def run_c(name: str, x: np.ndarray) -> np.ndarray:
    """`name` applied to the flat array `x` by a one-node generated kernel."""
    dtype = get_dtype(x.dtype.name)
    node = Node(REGISTRY[name], [Value(x.shape, dtype)], {}, Value(x.shape, dtype))
    return codegen.FusedElementwise(Group([node])).kernel(np, x)


def numpy_of(name: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if name == "erf":  # the eager float32 kernel is kiln_erff itself (ops/erf_native.py): SciPy is the oracle
            return np.asarray(_erf_numpy(np, x))
        return np.asarray(REGISTRY[name].kernel(np, x))


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Ulps between values on the ordered integer line (so across zero and into subnormals);
    NaN vs NaN is 0 whatever the sign and payload, NaN vs a number is huge."""
    signed = np.dtype(f"i{got.itemsize}")
    lines = []
    for a in (got, want):
        i = a.view(signed).astype(np.int64)
        lines.append(np.where(i < 0, np.int64(np.iinfo(signed).min) - i, i))
    d = np.abs(lines[0] - lines[1])
    both_nan = np.isnan(got) & np.isnan(want)
    d[both_nan] = 0
    d[np.isnan(got) != np.isnan(want)] = np.iinfo(np.int64).max
    return d


def exact_misses(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where NumPy gives a NaN, an infinity or a zero that C does not give bit for bit (NaN: any NaN)."""
    special = ~np.isfinite(want) | (want == 0)
    same = (got.view(f"u{got.itemsize}") == want.view(f"u{want.itemsize}")) | (np.isnan(got) & np.isnan(want))
    return special & ~same


def dense_grid(step: int) -> np.ndarray:
    """Every `step`-th float32 bit pattern (both signs, all binades), plus the edges."""
    bits = np.arange(0, 2**32, step, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([bits.view(np.float32), np.array(EDGES_F32, np.float32)])


def random_values(dtype: str, n: int = 60_000) -> np.ndarray:
    rng = np.random.default_rng(7)
    parts = [rng.standard_normal(n) * scale for scale in (1e-3, 0.3, 1.0, 3.0, 30.0)]
    parts.append(rng.uniform(-120, 120, n))
    return np.concatenate(parts).astype(dtype)


def check(name: str, x: np.ndarray, allowed: int) -> int:
    """Assert the bound and the special values; return the largest distance seen."""
    got, want = run_c(name, x), numpy_of(name, x)
    assert got.dtype == want.dtype
    miss = exact_misses(got, want)
    assert not miss.any(), f"{name}: special values differ at x={x[miss][:6]}: C {got[miss][:6]} vs NumPy {want[miss][:6]}"
    d = ulps(got, want)
    worst = int(np.argmax(d))
    assert d[worst] <= allowed, (f"{name}({x[worst]!r}) = {got[worst]!r} in C but {want[worst]!r} in NumPy: "
                                 f"{d[worst]} ulp (allowed {allowed}); {int((d > allowed).sum())} values over")
    return int(d[worst])


def test_float32_table_entries_are_the_vectorized_versions():
    for name in FUNCTIONS:
        assert C.expr(REGISTRY[name], "float", ["x"]) == f"kiln_{name}f(x)"


@pytest.mark.parametrize("extra_flags", [[], ["-mno-fma"]] if X86 else [[]], ids=["default", "no-fma"][: 2 if X86 else 1])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_float32_within_4_ulp_of_numpy(kernel_cache, monkeypatch, name, extra_flags):
    monkeypatch.setattr(toolchain, "FLAGS", [*toolchain.FLAGS, *extra_flags])
    check(name, dense_grid(8191), F32_ULPS)
    check(name, random_values("float32"), F32_ULPS)


@pytest.mark.slow
@pytest.mark.parametrize("name", FUNCTIONS)
def test_float32_within_4_ulp_of_numpy_on_a_denser_grid(kernel_cache, name):
    check(name, dense_grid(257), F32_ULPS)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_float32_special_values_are_numpys(kernel_cache, name):
    x = np.array(EDGES_F32 * 300, np.float32)  # long enough for the vector loop
    got, want = run_c(name, x), numpy_of(name, x)
    assert not exact_misses(got, want).any()
    signed_zero = want == 0
    assert (np.signbit(got[signed_zero]) == np.signbit(want[signed_zero])).all()
    assert ulps(got, want).max() <= F32_ULPS


@pytest.mark.parametrize("name", FUNCTIONS)
def test_float64_within_its_bound(kernel_cache, name):
    allowed = C_EXPR_ULPS[name]["float64"]
    x = np.concatenate([random_values("float64"), np.array(EDGES_F32 + [709.78, 709.79, -745.13, -745.14,
                                                                         4.9e-324, -4.9e-324, 2.2250738585072014e-308])])
    check(name, x, allowed)


@pytest.mark.skipif(not X86, reason="GCC's vectorizer report is checked on x86")
def test_the_loop_around_them_vectorizes(tmp_path):
    """GCC reports the loop of each float32 function's one-node kernel as vectorized."""
    command = toolchain.compiler_command()
    version = subprocess.run([*command, "--version"], capture_output=True, text=True).stdout
    if "clang" in version.lower() or "gcc" not in version.lower() and "free software" not in version.lower():
        pytest.skip("not GCC")
    for name in FUNCTIONS:
        x = Value((4096,), get_dtype("float32"))
        node = Node(REGISTRY[name], [x], {}, Value((4096,), get_dtype("float32")))
        source = codegen.FusedElementwise(Group([node])).source
        src = tmp_path / f"{name}.c"
        src.write_text(source)
        flags = [f for f in toolchain.FLAGS if f not in ("-shared", "-fPIC")]
        out = subprocess.run([*command, *flags, "-c", str(src), "-o", str(tmp_path / f"{name}.o"),
                              "-fopt-info-vec-optimized"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        loop_line = next(i for i, line in enumerate(source.splitlines(), 1) if "for (long long j" in line)
        assert f"{name}.c:{loop_line}:" in out.stderr and "loop vectorized" in out.stderr, \
            f"{name}: the loop was not vectorized:\n{out.stderr}"
