"""Every primitive's C expression (`c_expr`) against its own NumPy kernel, on special values.

For each primitive in the registry that has a `c_expr`, and each combination of operand
dtypes the C code generator handles and the primitive accepts, a one-node kernel is
rendered and built by the real cpu backend (codegen.FusedElementwise: the same template
expansion, `{dtype}`/`{f}` substitution, typed locals and compiler flags as fused code)
and run on the cartesian grid of special values (+-0, +-inf, nan, subnormals, the largest
finite, +-0.5, +-2.5, ...), tiled past elementwise_groups.MIN_ELEMENTS so the vectorized loop runs too.
The reference is `prim.kernel(numpy, ...)`, the code eager execution runs.

Comparison: bit for bit (values viewed as unsigned integers, so -0.0 != +0.0), except
that NaN equals NaN whatever its sign and payload. IEEE 754 leaves both unspecified for
computed NaNs, and they do differ between equally valid implementations: x86's "default
NaN" from 0/0 has the sign bit set while libm and NumPy's SIMD loops may return a
positive NaN. Nothing in kiln may depend on a NaN's sign or payload.

Primitives in tolerances.C_EXPR_ULPS (transcendentals, pow: no C matches NumPy's SIMD,
SVML or SciPy implementations bit for bit) are compared in ulps instead. Of those, only
the transcendental ones (`Primitive.transcendental`) fuse, and only in float32 (kiln's vectorized versions): every other
fused op must be bit-identical. The end-to-end tests compile each fusible op with
kiln.compile(backend="cpu") and compare with eager execution (in ulps for those).
"""
from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from tolerances import C_EXPR_ULPS

import kiln
from kiln.dtypes import ALL_DTYPES, DType, get_dtype
from kiln.jit.backends import cpu
from kiln.jit.backends.cpu import codegen, elementwise_groups, toolchain
from kiln.jit.backends.cpu.elementwise_groups import Group
from kiln.jit.backends.render import C
from kiln.jit.ir import Node, Value
from kiln.ops.primitive import REGISTRY, AbstractValue, Primitive, bind

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

# ---- the grid ---------------------------------------------------------------------------------
FLOAT_GRID = (
    0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.0, -3.0,
    2.0, -2.0, 0.1, -0.1, 1 / 3, -8.0, 7.0, -7.0, 100.0, -100.0, 88.75, -104.0, 710.0, -745.5,
    1e16, -1e16, 1e30, -1e30, 1e300, -1e300, 1e-30, -1e-30, 1e-310, -1e-310,
)
INT_GRID = (0, 1, -1, 2, -2, 3, -3, 7, -7)  # plus the dtype's min and max


def c_dtypes() -> list[DType]:
    """The dtypes the C code generator can load and store."""
    return [d for d in ALL_DTYPES if d.name in codegen.C_TYPES]


def grid(dtype: DType) -> np.ndarray:
    """The special values of `dtype`, each once (by bits)."""
    if dtype.kind == "b":
        return np.array([False, True])
    if dtype.kind == "i":
        info = np.iinfo(dtype.np)
        return np.array([*INT_GRID, info.min, info.max, info.min + 1], dtype=dtype.np)
    info = np.finfo(dtype.np)
    extremes = [info.smallest_subnormal, info.tiny, info.tiny - info.smallest_subnormal, info.max, info.eps]
    with np.errstate(over="ignore", under="ignore"):
        values = np.array([*FLOAT_GRID, *extremes, *(-np.array(extremes))], dtype=np.float64).astype(dtype.np)
    _, first = np.unique(values.view(f"u{values.itemsize}"), return_index=True)
    return values[np.sort(first)]


def cartesian(grids: list[np.ndarray], min_size: int) -> list[np.ndarray]:
    """Every combination of one value per grid, as flat contiguous arrays tiled to `min_size`."""
    mesh = np.meshgrid(*grids, indexing="ij")
    flat = [m.reshape(-1) for m in mesh]
    reps = -(-min_size // flat[0].size)
    return [np.ascontiguousarray(np.tile(f, reps)) for f in flat]


# ---- which primitives, dtypes and params ------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One primitive applied to operands of given dtypes with given params."""

    name: str
    in_dtypes: tuple[str, ...]
    params: tuple[tuple[str, Any], ...]
    out_dtype: str

    @property
    def prim(self) -> Primitive:
        return REGISTRY[self.name]

    @property
    def kwargs(self) -> dict:
        return dict(self.params)

    def __str__(self) -> str:
        extra = "".join(f",{k}={v}" for k, v in self.params)
        return f"{self.name}({','.join(self.in_dtypes)}{extra})->{self.out_dtype}"


def c_primitives() -> list[str]:
    """Every registered primitive the C renderer spells (its table, or the primitive's own c_expr)."""
    return sorted(name for name, prim in REGISTRY.items() if C.template(prim) is not None)


def _arity_and_params(prim: Primitive) -> tuple[int, list[str]]:
    """How many array operands the kernel takes, and the names of its keyword params."""
    sig = list(inspect.signature(prim.kernel).parameters.values())[1:]  # after xp
    arity = sum(p.kind is p.POSITIONAL_OR_KEYWORD for p in sig)
    return arity, [p.name for p in sig if p.kind is p.KEYWORD_ONLY]


def _param_choices(prim: Primitive, names: list[str]) -> list[tuple[tuple[str, Any], ...]]:
    """Every params combination to test; a param this test does not know fails loudly."""
    values = {"dtype": [d.name for d in c_dtypes()]}
    unknown = [n for n in names if n not in values]
    assert not unknown, f"{prim.name}: teach test_c_expressions.py which values of {unknown} to test"
    return [tuple(zip(names, combo)) for combo in itertools.product(*(values[n] for n in names))]


def _accepts(prim: Primitive, in_dtypes: tuple[DType, ...], params: dict) -> str | None:
    """The output dtype name when eager supports these operand dtypes consistently, else None.

    Supported means: the abstract rule accepts them, the NumPy kernel runs, and its result
    has the dtype the abstract rule promises (a mismatch is eager's problem, not C's).
    """
    try:
        out = prim.abstract(*[AbstractValue((2,), d) for d in in_dtypes], **params)
        with np.errstate(all="ignore"):
            result = prim.kernel(np, *[np.zeros(2, d.np) for d in in_dtypes], **params)
    except (TypeError, ValueError):
        return None
    if out.dtype.name not in codegen.C_TYPES or np.asarray(result).dtype != out.dtype.np:
        return None
    return out.dtype.name


def cases_for(name: str) -> list[Case]:
    """Every dtype/params combination of primitive `name` the C code generator could see."""
    prim = REGISTRY[name]
    arity, param_names = _arity_and_params(prim)
    cases = []
    for params in _param_choices(prim, param_names):
        for in_dtypes in itertools.product(c_dtypes(), repeat=arity):
            out = _accepts(prim, in_dtypes, dict(params))
            if out is not None:
                cases.append(Case(name, tuple(d.name for d in in_dtypes), params, out))
    return cases


ALL_CASES = [case for name in c_primitives() for case in cases_for(name)]
# a cast to the operand's own dtype is removed by ArithmeticElimination before fusion; transcendentals
# fuse in float32 only
FUSES = {name for name, prim in REGISTRY.items() if prim.fuses}
TRANSCENDENTAL = {name for name, prim in REGISTRY.items() if prim.transcendental}
FUSED_CASES = [case for case in ALL_CASES if case.name in FUSES
               and not (case.name == "cast" and case.in_dtypes == (case.out_dtype,))
               and not (case.name in TRANSCENDENTAL and case.out_dtype != "float32")]


# ---- running a C expression -----------------------------------------------------------------
def c_kernel(case: Case, size: int) -> codegen.FusedElementwise:
    """The primitive as a one-node fusion group over flat arrays of `size`, compiled."""
    inputs = [Value((size,), get_dtype(d)) for d in case.in_dtypes]
    node = Node(case.prim, inputs, case.kwargs, Value((size,), get_dtype(case.out_dtype)))
    return codegen.FusedElementwise(Group([node]))


def c_and_numpy(case: Case) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """(operands, C result, NumPy kernel result) on the grid."""
    operands = cartesian([grid(get_dtype(d)) for d in case.in_dtypes], elementwise_groups.MIN_ELEMENTS)
    kernel = c_kernel(case, operands[0].size)
    with np.errstate(all="ignore"):
        got = kernel.kernel(np, *operands)
        want = np.asarray(case.prim.kernel(np, *operands, **case.kwargs))
    assert got.dtype == want.dtype and got.shape == want.shape
    return operands, got, want


def _bits(a: np.ndarray) -> np.ndarray:
    """The raw bits: a C bool holding 2 must not pass for NumPy's True (1)."""
    return a.view(f"u{a.itemsize}")


def mismatches(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where `got` and `want` differ in bits; NaN matches NaN (sign and payload ignored)."""
    differ = _bits(got) != _bits(want)
    if got.dtype.kind == "f":
        differ &= ~(np.isnan(got) & np.isnan(want))
    return differ


def ulp_distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Ulps between finite nonzero values of one sign; zeros, infinities and NaN must match exactly
    (their distance is 0 when they do, else the largest int64)."""
    signed = np.dtype(f"i{got.itemsize}")
    order = [np.where(a.view(signed) < 0, np.iinfo(signed).min - a.view(signed), a.view(signed)).astype(np.int64)
             for a in (got, want)]
    exact = ~np.isfinite(got) | ~np.isfinite(want) | (got == 0) | (want == 0) | (np.signbit(got) != np.signbit(want))
    return np.where(exact, np.where(mismatches(got, want), np.iinfo(np.int64).max, 0), np.abs(order[0] - order[1]))


def describe(case: Case, operands: list[np.ndarray], got: np.ndarray, want: np.ndarray, where: np.ndarray,
             limit: int = 8) -> str:
    """The first few differing elements: operands, C and NumPy results with their bits."""
    lines = []
    for i in np.flatnonzero(where)[:limit]:
        args = ", ".join(repr(o[i].item()) for o in operands)
        lines.append(f"  {case.name}({args}): C {got[i].item()!r} [{_bits(got)[i]:#x}] "
                     f"vs NumPy {want[i].item()!r} [{_bits(want)[i]:#x}]")
    total = int(np.count_nonzero(where))
    return f"{case}: {total} of {got.size} elements differ\n" + "\n".join(lines)


@pytest.fixture
def kernel_cache(monkeypatch, tmp_path):
    """Build kernels in a fresh cache folder."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    return tmp_path


# ---- coverage -------------------------------------------------------------------------------
def test_every_c_expression_is_covered():
    """Each primitive with a c_expr is tested in at least one dtype, and codegen sees no dtype the grid lacks."""
    covered = {case.name for case in ALL_CASES}
    assert set(c_primitives()) <= covered, f"no testable dtype for {sorted(set(c_primitives()) - covered)}"
    assert elementwise_groups.DTYPES <= set(codegen.C_TYPES)
    assert {d.kind for d in c_dtypes()} <= {"b", "i", "f"}


def test_fusible_ops_have_c_expressions_and_only_transcendentals_a_tolerance():
    """Fused code is bit-identical to eager, except the float32 transcendentals: within 4 ulp."""
    for name in FUSES:
        assert C.template(REGISTRY[name]) is not None, name
    assert TRANSCENDENTAL <= FUSES
    assert set(C_EXPR_ULPS) & FUSES == TRANSCENDENTAL, \
        "an op with a C-vs-NumPy tolerance fuses only where its primitive says it is transcendental"
    assert all(C_EXPR_ULPS[name]["float32"] <= 4 for name in TRANSCENDENTAL)
    assert set(C_EXPR_ULPS) <= set(c_primitives())


# ---- C expression vs NumPy kernel -------------------------------------------------------------
@pytest.mark.parametrize("case", ALL_CASES, ids=str)
def test_c_expression_matches_the_numpy_kernel(kernel_cache, case):
    operands, got, want = c_and_numpy(case)
    allowed = C_EXPR_ULPS.get(case.name, {}).get(case.out_dtype)
    if allowed is None:
        bad = mismatches(got, want)
        assert not bad.any(), "not bit-identical: " + describe(case, operands, got, want, bad)
    else:
        bad = ulp_distance(got, want) > allowed
        assert not bad.any(), f"more than {allowed} ulp apart: " + describe(case, operands, got, want, bad)


# ---- end to end: kiln.compile(backend="cpu") vs eager -----------------------------------------
def _tensors(case: Case) -> list[kiln.Tensor]:
    operands = cartesian([grid(get_dtype(d)) for d in case.in_dtypes], elementwise_groups.MIN_ELEMENTS)
    return [kiln.tensor(o) for o in operands]


def _applied(case: Case):
    """keep, *xs -> where(keep, op(*xs), op(*xs)): the op and a bit-exact identity, so they fuse."""
    prim, params = case.prim, case.kwargs  # plain locals: kiln.compile warns about properties

    def fn(keep, *xs):
        y = bind(prim, xs, params)
        return kiln.where(keep, y, y)
    return fn


def _fused_names(compiled) -> list[str]:
    entry = compiled.cache_entries[0]
    plan = entry.plan if hasattr(entry, "plan") else entry.forward_plan  # inference or training entry
    return [n.prim.name for n in plan.graph.nodes if n.prim.name.startswith("fused")]


@pytest.mark.parametrize("case", FUSED_CASES, ids=str)
def test_compiled_fusible_op_equals_eager(kernel_cache, case):
    """Bit for bit, or within the op's ulp bound for the float32 transcendentals."""
    xs = _tensors(case)
    keep = kiln.tensor(np.ones(xs[0].shape, dtype=bool))
    fn = _applied(case)
    compiled = kiln.compile(fn, backend="cpu")
    with np.errstate(all="ignore"):
        compiled(keep, *xs)  # the first call traces: its result is eager's
        got, want = compiled(keep, *xs), fn(keep, *xs)
    assert _fused_names(compiled), f"{case} was not fused"
    g, w = got.numpy(), want.numpy()
    allowed = C_EXPR_ULPS.get(case.name, {}).get(case.out_dtype)
    bad = mismatches(g, w) if allowed is None else ulp_distance(g, w) > allowed
    assert not bad.any(), "compiled != eager: " + describe(case, [x.numpy() for x in xs], g, w, bad)


SCALAR_CASES = [case for case in FUSED_CASES if len(case.in_dtypes) == 2]


@pytest.mark.parametrize("case", SCALAR_CASES, ids=str)
def test_compiled_binary_op_with_a_scalar_operand_equals_eager(kernel_cache, case):
    """op(x, s) and op(s, x) with a 0-d s: C reads s by the "scalar" index form, NumPy takes its
    broadcast loops (where it may special-case a scalar, as it does for pow)."""
    x = _tensors(Case(case.name, case.in_dtypes[:1], case.params, case.out_dtype))[0]
    keep = kiln.tensor(np.arange(x.shape[0]) % 2 == 0)  # even elements op(x, s), odd ones op(s, x)

    prim, params = case.prim, case.kwargs

    def fn(keep, x, s):
        return kiln.where(keep, bind(prim, (x, s), params), bind(prim, (s, x), params))

    compiled = kiln.compile(fn, backend="cpu")
    for value in grid(get_dtype(case.in_dtypes[1])):
        s = kiln.tensor(np.array(value))
        with np.errstate(all="ignore"):
            compiled(keep, x, s)
            got, want = compiled(keep, x, s).numpy(), fn(keep, x, s).numpy()
        bad = mismatches(got, want)
        assert not bad.any(), f"compiled != eager with s={value!r}: " + describe(case, [x.numpy()], got, want, bad)
    assert _fused_names(compiled), f"{case} was not fused"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("extra_flags", [[], ["-ffp-contract=fast"]], ids=["default-flags", "fp-contract-fast"])
def test_multiply_add_rounds_twice_like_numpy(kernel_cache, monkeypatch, dtype, extra_flags):
    """x*y+z must not become one FMA (one rounding) where NumPy multiplies and adds separately.

    -std=c99 already keeps GCC from contracting; the generated source also turns contraction
    off itself (codegen.PRELUDE), so a toolchain that enables it (-std=gnu99, an explicit
    -ffp-contract=fast, clang's default contraction within one expression) still gets NumPy's bits. On a CPU with FMA, building this
    source without the pragma under -ffp-contract=fast differs in about a quarter of the elements.
    """
    monkeypatch.setattr(toolchain, "FLAGS", [*toolchain.FLAGS, *extra_flags])
    rng = np.random.default_rng(0)
    x, y, z = (kiln.tensor(rng.standard_normal(2 * elementwise_groups.MIN_ELEMENTS).astype(dtype)) for _ in range(3))

    def fn(x, y, z):
        return x * y + z

    compiled = kiln.compile(fn, backend="cpu")
    compiled(x, y, z)
    got, want = compiled(x, y, z).numpy(), fn(x, y, z).numpy()
    assert _fused_names(compiled) == ["fused[mul -> add]"]
    bad = mismatches(got, want)
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} multiply-adds were contracted into FMAs"


# ---- the renderer: its table first, a third-party primitive's own c_expr otherwise -------------
class _Cube(Primitive):
    """A primitive from outside kiln: the renderer's table does not know it (name set per instance,
    so it stays out of the registry)."""

    c_expr = "({0} * {0} * {0})"

    def kernel(self, xp, x):
        return x * x * x


def test_a_third_party_c_expr_is_rendered_and_fused(kernel_cache):
    cube = _Cube()
    cube.name = "cube_from_elsewhere"
    assert cube.name not in C.ops and C.template(cube) == _Cube.c_expr
    x = np.linspace(-3, 3, elementwise_groups.MIN_ELEMENTS, dtype=np.float32)
    node = Node(cube, [Value(x.shape, get_dtype("float32"))], {}, Value(x.shape, get_dtype("float32")))
    kernel = codegen.FusedElementwise(Group([node]))
    assert "(x0 * x0 * x0)" in kernel.source
    bad = mismatches(kernel.kernel(np, x), cube.kernel(np, x))
    assert not bad.any()


def test_the_table_spells_every_builtin_elementwise_primitive():
    """Built-in primitives carry no C of their own: the renderer's table holds it."""
    for name in c_primitives():
        assert REGISTRY[name].c_expr is None, f"{name} spells itself; move its C into render/cstyle.py"
        assert name in C.ops


def test_a_primitive_without_any_spelling_says_how_to_add_one():
    with pytest.raises(ValueError, match="c_expr"):
        C.render_template("mystery", None, "float", ["x0"])
