"""Every primitive through both backends: eager, kiln.compile(backend="interpret") and
kiln.compile(backend="cpu") on the same random inputs must agree.

The table (primitive_cases.py) reaches each primitive from user-level kiln code. Each case
draws operands from a seed: broadcasting shapes, size-1 and size-0 dims, transposed, strided
and offset views, float32, float64, int64 and bool where the op takes them, and special
values (NaN, +-inf, -0.0, huge, tiny, subnormal). The op's result may go through a small
chain ("affine": ``y * 2 + 1`` and ``y * -0.5``; "rows": ``y * -0.5`` and a sum over the
last axis of ``y * 2 + 1``) so elementwise and row fusion patterns run too; "big" cases pass
4096 elements, where the fused kernels' vectorized loops run (and, for a case on its own,
the Python replay without the native runtime fuses too). Gradients of the operands come
from a random upstream gradient. Each function is called three times on fresh copies of the
same inputs: the first call traces, the second replays (a non-contiguous input is then a new
layout, observed in Python), the third runs the native variant made for those layouts (and
a case fails when it does not: a plan whose native code never runs is checked for nothing).

C compilation dominates the cost, so the default tests run bundles: one case of every
primitive in ONE compiled function (a few compilations for the whole table); a bundle's
failure names each disagreeing case, and test_one_case[<id>] (slow) reruns one on its own.

Comparison: bit for bit (values viewed as unsigned integers, so -0.0 != +0.0; NaN equal to
NaN whatever its payload). Where a case's graph holds a transcendental of
tolerances.C_EXPR_ULPS, the cpu backend (its C may use other implementations than NumPy) is
held to that many ulps of each result, plus as many ulps of the largest finite magnitude in
that result, since the chain after the op can cancel; infinities and NaN positions stay
exact, and the interpreter is always bit-exact with eager. Random primitives: from the same
seed, the compiled streams equal eager's, call after call.
"""
from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
from primitive_cases import EXCLUDED, FLOATS, TABLE, Arg, Draw, Entry
from tolerances import C_EXPR_ULPS

import kiln
from kiln.fuzz.harness import rounding_noise
from kiln.jit.backends import cpu
from kiln.jit.backends.cpu import runtime
from kiln.jit.trace import trace
from kiln.ops.primitive import REGISTRY

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

CALLS = 3  # trace; a replay (a new input layout is observed in Python); a replay in the variant made for it


# ---- cases ------------------------------------------------------------------------------------------
# Bundles: each runs one case of every primitive that takes its dtype (the others: their own
# dtype) in ONE compiled function, so a handful of C compilations cover the whole table.
BUNDLES = [("small", "float64", "plain"), ("big", "float32", "rows"), ("empty", "float32", "plain"),
           ("small", "int64", "plain")]
SLOW_BUNDLES = [("small", "float32", "rows"), ("small", "float64", "affine"), ("empty", "float64", "affine"),
                ("big", "float64", "affine"), ("big", "int64", "rows")]

# case id -> why it fails (a known bug): run on its own, as a strict xfail, and kept out of the bundles
XFAIL: dict[str, str] = {
    "arange-float64-big-affine": (
        "cpu runtime.py layout variants: x.T + kiln.arange(n) (x.T column-major), then y * 2 + 1 and y * -0.5: "
        "the variant made for x.T's layout runs fused[add] as a Python unit, and NumPy keeps its output "
        "column-major; a segment reads that output assuming C order. The plan now watches that result and "
        "makes a variant for its layout on the next miss, so the native code runs from the third replay, "
        "but the first variant cannot predict NumPy's result layout: two replays miss where one should "
        "(values stay right)"),
}


def _case_dtype(entry: Entry, dtype: str) -> str | None:
    if dtype in entry.dtypes:
        return dtype
    if dtype == "int64":
        return "bool" if "bool" in entry.dtypes else None
    return None if set(entry.dtypes) & set(FLOATS) else entry.dtypes[0]


def bundle_cases(size: str, dtype: str, chain: str) -> list[tuple[str, str, str, str]]:
    """(name, dtype, size, chain) of each primitive in one bundle."""
    out = []
    for name, entry in sorted(TABLE.items()):
        t = _case_dtype(entry, dtype)
        if t is not None and (size != "empty" or entry.empty):
            out.append((name, t, size, chain))
    return out


def case_id(name: str, dtype: str, size: str, chain: str) -> str:
    return f"{name}-{dtype}-{size}-{chain}"


def _all_cases() -> list[tuple[str, str, str, str]]:
    return sorted({c for b in BUNDLES + SLOW_BUNDLES for c in bundle_cases(*b)})


@pytest.fixture(autouse=True)
def eager_plans():
    runtime._made.clear()  # native code is generated at once, not after a Python first call


@dataclass
class Part:
    """One primitive's case: the user-level function (with its chain), its operands, and what its
    unoptimized trace holds."""

    case_id: str
    name: str
    fn: Callable
    args: list[Arg]
    float: str
    prims: set

    def __repr__(self) -> str:
        return f"{self.case_id}: {self.name}({', '.join(map(repr, self.args))})"


def make_part(name: str, dtype: str, size: str, chain: str, tag: str = "", **draw_options: Any) -> Part:
    """Draw the operands of one case from its seed (the same inside a bundle and on its own)."""
    entry = TABLE[name]
    seed = zlib.crc32(f"{name} {dtype} {size} {chain} {tag}".encode())
    draw = Draw(np.random.default_rng(seed), dtype, size, grad=entry.grad, **draw_options)
    fn, args = entry.build(draw)
    fn = _chain(fn, chain, draw.float)
    with np.errstate(all="ignore"):
        prims = {n.prim.name for n in trace(fn, tuple(a.make()[1] for a in args)).graph.nodes}
    return Part(case_id(name, dtype, size, chain) + (f"-{tag}" if tag else ""), name, fn, args, draw.float, prims)


# ---- running -------------------------------------------------------------------------------------
def _chain(fn, chain: str, float_dtype: str):
    """fn followed by a fusible chain on each output: cast to float, then y * 2 + 1 and y * -0.5
    ("affine"), or y * -0.5 and a row sum of y * 2 + 1 ("rows")."""
    if chain == "plain":
        return fn

    def post(y):
        if y.dtype.name not in FLOATS:
            y = y.to(float_dtype)
        z = y * 2.0 + 1.0
        if chain == "rows" and z.ndim:
            return y * -0.5, z.sum(-1)
        return z, y * -0.5  # exact: keeps the sign of zero that + 1 would hide

    def chained(*args):
        out = fn(*args)
        return tuple(post(o) for o in out) if isinstance(out, tuple) else post(out)
    return chained


def _flatten(out: Any) -> list[kiln.Tensor]:
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flatten(o)]
    assert isinstance(out, kiln.Tensor), f"the function returned {type(out).__name__}, not tensors"
    return [out]


def _bundle(parts: list[Part]) -> Callable:
    """One function running every part on its slice of the operands; a tuple of outputs per part."""
    spans, at = [], 0
    for p in parts:
        spans.append((p.fn, at, at + len(p.args)))
        at += len(p.args)

    def bundled(*views):
        return tuple(tuple(_flatten(fn(*views[lo:hi]))) for fn, lo, hi in spans)
    return bundled


def _run(parts: list[Part], mode: str, seed: int, native: bool = True):
    """CALLS calls of the bundle in `mode` from one RNG seed. Per call and part: its outputs as
    (array, requires_grad), and the gradients of its operands' bases (one random upstream
    gradient per float output that requires grad)."""
    runner = _bundle(parts)
    if mode != "eager":
        runner = kiln.compile(runner, backend=mode)
    saved = cpu.NATIVE_RUNTIME
    cpu.NATIVE_RUNTIME = native
    try:
        kiln.manual_seed(seed)
        calls = []
        for call in range(CALLS):
            made = [[a.make() for a in p.args] for p in parts]
            views = [view for m in made for _, view in m]
            leaves = [[leaf for (leaf, _), a in zip(m, p.args) if a.grad] for m, p in zip(made, parts)]
            with np.errstate(all="ignore"), warnings.catch_warnings():
                # the bundle's tuple of parts is never changed: nothing for a guard to see
                warnings.filterwarnings("ignore", "kiln.compile.*too large to guard", RuntimeWarning)
                outs = runner(*views)
                values = [[(o.detach().numpy().copy(), o.requires_grad) for o in part] for part in outs]
                diff = [o for part in outs for o in part if o.requires_grad]
                flat_leaves = [leaf for ls in leaves for leaf in ls]
                grads = [[] for _ in parts]
                if flat_leaves and diff:
                    rng = np.random.default_rng(seed + call)
                    ups = [kiln.tensor(rng.standard_normal(o.shape).astype(o.dtype.name)) for o in diff]
                    flat = kiln.autograd.grad(diff, flat_leaves, grad_outputs=ups, allow_unused=True)
                    flat = [None if g is None else g.numpy().copy() for g in flat]
                    at = 0
                    for i, ls in enumerate(leaves):
                        grads[i], at = flat[at:at + len(ls)], at + len(ls)
            calls.append(list(zip(values, grads)))
    finally:
        cpu.NATIVE_RUNTIME = saved
    return calls, runner


def _plan_prims(compiled) -> set[str]:
    names = set()
    for entry in compiled.cache_entries:
        plans = [entry.plan] if hasattr(entry, "plan") else [entry.forward_plan, entry.backward_plan]
        names |= {n.prim.name for p in plans if p is not None for n in p.graph.nodes}
    return names


# ---- comparing -----------------------------------------------------------------------------------
def _bits(a: np.ndarray) -> np.ndarray:
    """The array's bits as unsigned integers, every NaN made the same NaN."""
    a = np.ascontiguousarray(a)
    if a.dtype.kind == "f":
        a = np.where(np.isnan(a), np.array(np.nan, a.dtype), a)
    return a.view(f"u{a.itemsize}") if a.dtype.kind in "fiu" else a


def assert_same(got: np.ndarray, want: np.ndarray, what: str, ulps: int = 0, slack: Any = None) -> None:
    """got equals want bit for bit (NaN payloads aside), or, with `ulps`, where both are finite, within
    `ulps` ulps of want plus `ulps` times twice `slack` (how far an ulp or two of rounding moved each
    element in a few random trials: twice, as random signs may have partly cancelled there)."""
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
    differ = _bits(got) != _bits(want)
    if ulps and got.dtype.kind == "f" and differ.any():
        finite = np.isfinite(want) & np.isfinite(got)
        allowed = ulps * (np.spacing(np.abs(want)).astype(np.float64) + (0.0 if slack is None else 2 * slack))
        with np.errstate(all="ignore"):
            near = finite & (np.abs(got.astype(np.float64) - want) <= allowed)
        differ &= ~near
    if differ.any():
        where = np.flatnonzero(differ)[:4]
        raise AssertionError(f"{what}: {int(differ.sum())} of {differ.size} elements differ"
                             f"{f' by more than {ulps} ulps' if ulps else ''}, e.g. at flat {where.tolist()}: "
                             f"{got.reshape(-1)[where].tolist()} vs {want.reshape(-1)[where].tolist()}")


def _spread(noisy: list, exact: list) -> list:
    """Per call, output and gradient of one part: the largest |noisy - exact| over the noisy runs
    (0 where either is not finite), i.e. what a rounding step of an ulp or two does to it."""
    def gap(arrays: list, ref: Any) -> Any:
        if ref is None or ref.dtype.kind != "f":
            return None
        with np.errstate(all="ignore"):
            d = [np.abs(a.astype(np.float64) - ref) for a in arrays if a is not None and a.shape == ref.shape]
        return np.nan_to_num(np.max(d, axis=0), nan=0.0, posinf=0.0) if d else None

    out = []
    for call, (values, grads) in enumerate(exact):
        vs = [gap([run[call][0][j][0] for run in noisy], v) for j, (v, _) in enumerate(values)]
        gs = [gap([run[call][1][j] for run in noisy if len(run[call][1]) > j], g) for j, g in enumerate(grads)]
        out.append((vs, gs))
    return out


def _compare(got, want, ulps: int = 0, slack: list | None = None) -> None:
    """One part's calls: outputs (values and requires_grad) and gradients."""
    for call, ((gv, gg), (wv, wg)) in enumerate(zip(got, want)):
        vs, gs = slack[call] if slack else ([None] * len(wv), [None] * len(wg))
        assert len(gv) == len(wv), f"{len(gv)} outputs vs {len(wv)}"
        for i, ((g, g_req), (w, w_req)) in enumerate(zip(gv, wv)):
            assert g_req == w_req, f"call {call} output {i}: requires_grad {g_req} vs {w_req}"
            assert_same(g, w, f"call {call} output {i}", ulps, vs[i])
        assert len(gg) == len(wg), f"call {call}: {len(gg)} gradients vs {len(wg)}"
        for i, (g, w) in enumerate(zip(gg, wg)):
            assert (g is None) == (w is None), f"call {call}: gradient {i} is None on one side only"
            if g is not None:
                assert_same(g, w, f"call {call} gradient of operand {i}", ulps, gs[i])


def check_parts(parts: list[Part], replay: bool = False) -> Any:
    """Run the parts as one function eagerly, compiled on the interpreter and on the cpu backend
    (and, with `replay`, on the cpu backend without its native runtime) and compare each part.
    Returns the cpu backend's compiled function."""
    seed = zlib.crc32(" ".join(p.case_id for p in parts).encode())
    eager, _ = _run(parts, "eager", seed)
    interp, interp_fn = _run(parts, "interpret", seed)
    in_plans = _plan_prims(interp_fn)
    problems = [f"{p!r}: its graphs hold {sorted(p.prims)}, not {p.name}" for p in parts
                if p.name not in p.prims and p.name not in in_plans]  # (backward-only ones: in the plans)
    runs, cpu_fn = {}, None
    runs["cpu"], cpu_fn = _run(parts, "cpu", seed)
    for entry in cpu_fn.cache_entries:
        for plan in [entry.plan] if hasattr(entry, "plan") else [entry.forward_plan, entry.backward_plan]:
            if isinstance(plan, runtime.NativePlan) and plan.observed_calls > 1:  # (the first replay may be)
                problems.append(f"{parts if len(parts) < 3 else 'the bundle'}: the cpu plan met input layouts none "
                                f"of its {len(plan.variants)} variants reads on {plan.observed_calls} of "
                                f"{CALLS - 1} replays, so its native code did not run on them")
    if replay:
        runs["cpu without the native runtime"] = _run(parts, "cpu", seed, native=False)[0]
    ulps = [max([C_EXPR_ULPS[t].get(p.float, 0) for t in p.prims if t in C_EXPR_ULPS], default=0) for p in parts]
    noisy = []
    if any(ulps):  # how much an ulp of rounding moves each result: eager runs with every result nudged
        for noise_seed in (1, 2, 3):
            with rounding_noise(noise_seed):
                noisy.append(_run(parts, "eager", seed)[0])
    for i, p in enumerate(parts):
        slack = _spread([[c[i] for c in run] for run in noisy], [c[i] for c in eager]) if ulps[i] else None
        pairs = [("interpret", interp, "eager", eager, 0)]
        pairs += [(mode, run, other, ref, ulps[i]) for mode, run in runs.items()
                  for other, ref in (("interpret", interp), ("eager", eager))]
        for mode, run, other, ref, tolerance in pairs:
            try:
                _compare([c[i] for c in run], [c[i] for c in ref], tolerance, slack)
            except AssertionError as exc:
                problems.append(f"{p!r}: {mode} vs {other}: {exc}")
                break
    assert not problems, f"{len(problems)} of {len(parts)} cases disagree:\n" + "\n".join(problems)
    return cpu_fn


def check_case(name: str, dtype: str, size: str, chain: str, tag: str = "", **draw_options: Any) -> None:
    """One primitive's case on its own (with the Python replay too, for big ones)."""
    check_parts([make_part(name, dtype, size, chain, tag, **draw_options)], replay=size == "big")


# ---- tests ---------------------------------------------------------------------------------------
def test_every_primitive_is_in_the_table_or_excluded_with_a_reason():
    missing = sorted(set(REGISTRY) - set(TABLE) - set(EXCLUDED))
    assert not missing, f"primitives with no differential case: {missing}; add them to primitive_cases.TABLE"
    both = sorted(set(TABLE) & set(EXCLUDED))
    assert not both, f"both in the table and excluded: {both}"
    stale = sorted((set(TABLE) | set(EXCLUDED)) - set(REGISTRY))
    assert not stale, f"not primitives (renamed or removed?): {stale}"
    assert all(len(reason) > 20 for reason in EXCLUDED.values())


@pytest.mark.parametrize("size, dtype, chain", [pytest.param(*b, id="-".join(b)) for b in BUNDLES] +
                         [pytest.param(*b, id="-".join(b), marks=pytest.mark.slow) for b in SLOW_BUNDLES])
def test_every_primitive_agrees_across_backends(size, dtype, chain):
    """One bundle; a failing case reruns on its own as test_one_case[<its id>]."""
    parts = [make_part(*c) for c in bundle_cases(size, dtype, chain) if case_id(*c) not in XFAIL]
    compiled = check_parts(parts)  # (which also checks that the native variants ran)
    (entry,) = compiled.cache_entries
    for plan in [entry.plan] if hasattr(entry, "plan") else [entry.forward_plan, entry.backward_plan]:
        assert isinstance(plan, runtime.NativePlan), f"no generated code for the bundle: {type(plan).__name__}"


def _case_params(known_bad: bool) -> list:
    out = []
    for c in _all_cases():
        reason = XFAIL.get(case_id(*c))
        if (reason is not None) == known_bad:
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else [pytest.mark.slow]
            out.append(pytest.param(*c, id=case_id(*c), marks=marks))
    return out


@pytest.mark.parametrize("name, dtype, size, chain", _case_params(known_bad=True))
def test_known_bugs(name, dtype, size, chain):
    check_case(name, dtype, size, chain)


@pytest.mark.parametrize("name, dtype, size, chain", _case_params(known_bad=False))
def test_one_case(name, dtype, size, chain):
    """The bundles' cases one by one (each compiles on its own: slow), big ones also on the Python replay."""
    check_case(name, dtype, size, chain)


@pytest.mark.parametrize("name, table, spelling", [
    # NaN does not win, and max(0.0, -0.0) is 0.0 (float maximum is spelled as a select on bits)
    ("maximum", "float_selects", "kiln_select{f}(({0} >= {1}) | ({1} != {1}), {0}, {1})"),
    ("neg", "ops", "(0 - {0})"),  # -(+0.0) is -0.0, but 0 - 0.0 is +0.0
])
def test_a_wrong_c_spelling_is_caught(monkeypatch, name, table, spelling):
    """Not vacuous: C that is wrong only on special values fails the comparison with the interpreter
    (on contiguous inputs, which the first native variant reads)."""
    from kiln.jit.backends.render import C

    monkeypatch.setitem(getattr(type(C), table), name, spelling)
    parts = [make_part(name, "float32", "big", "plain", tag=f"mutant {i}", views=("C",)) for i in range(4)]
    with pytest.raises(AssertionError, match="cpu vs interpret"):
        check_parts(parts)


@pytest.mark.parametrize("a_shape, b_shape", [((3, 1, 2, 0), (0, 4)), ((3, 1, 2, 5), (5, 0)), ((2, 0, 5), (5, 3))])
def test_matmul_gradient_of_a_shared_matrix_with_empty_dims(a_shape, b_shape):
    """Regression: the VJP of a batched a @ 2-D b flattened a's batch with reshape(-1, K), which
    no size can satisfy when K (or N) is 0; eager and compiled backward raised ShapeError."""
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    g_np = rng.standard_normal(a_shape[:-1] + b_shape[-1:])
    want_a = g_np @ b_np.T  # by hand: dA = G B^T, dB = sum over the batch of A^T G
    rows = int(np.prod(a_shape[:-1]))
    want_b = a_np.reshape(rows, a_shape[-1]).T @ g_np.reshape(rows, b_shape[-1])
    for fn in (lambda a, b: a @ b, kiln.compile(lambda a, b: a @ b, backend="cpu")):
        for _ in range(2):
            a, b = kiln.tensor(a_np, requires_grad=True), kiln.tensor(b_np, requires_grad=True)
            fn(a, b).backward(kiln.tensor(g_np))
            np.testing.assert_allclose(a.grad.numpy(), want_a, atol=1e-12)
            np.testing.assert_allclose(b.grad.numpy(), want_b, atol=1e-12)


def test_rounding_noise_keeps_zero_d_results_arrays():
    """Regression: the ulp slack's nudged eager runs turned 0-d results and gradients into NumPy
    scalars, which a tensor cannot hold (.numpy() raised AttributeError)."""
    x = kiln.tensor(np.float32(0.5), requires_grad=True)
    with rounding_noise(1):
        y = x.exp()
        (g,) = kiln.autograd.grad([y], [x], grad_outputs=[kiln.tensor(np.float32(1.0))])
    assert isinstance(y.detach().numpy(), np.ndarray) and isinstance(g.numpy(), np.ndarray)
    np.testing.assert_allclose(g.numpy(), np.exp(np.float32(0.5)), rtol=1e-6)


def test_a_native_variant_whose_segment_has_no_arguments():
    """Regression: a native variant for strided inputs (the backward of a[..., ::2] ** b[::2]) left a
    segment holding only a `full` node, whose empty argument tuple the driver rendered as `(,)`."""
    rng = np.random.default_rng(0)
    a_np, b_np, g_np = rng.standard_normal((7, 4, 10)), rng.standard_normal(10), rng.standard_normal((7, 4, 5))
    compiled = kiln.compile(lambda a, b: a ** b, backend="cpu")
    for _ in range(CALLS):
        grads = []
        for fn in (compiled, lambda a, b: a ** b):
            a, b = kiln.tensor(a_np, requires_grad=True), kiln.tensor(b_np, requires_grad=True)
            fn(a[..., ::2], b[::2]).backward(kiln.tensor(g_np))
            grads.append((a.grad.numpy(), b.grad.numpy()))
        for got, want in zip(*grads):
            assert_same(got, want, "gradient")


@pytest.mark.xfail(strict=True, reason=XFAIL["arange-float64-big-affine"].replace(
    "x.T + kiln.arange(n)", "x.T - s").replace("fused[add]", "fused[sub]"))
def test_a_column_major_input_gets_a_variant_that_runs():
    """The smallest form of the arange case above (also seen with amax and sub cases on x.T)."""
    rng = np.random.default_rng(0)
    x_np, s_np = rng.standard_normal((3, 4)), rng.standard_normal(())

    def f(x, s):
        y = x - s
        return y * 2.0 + 1.0, y * -0.5
    compiled = kiln.compile(f, backend="cpu")
    with kiln.no_grad():
        for _ in range(4):
            x, s = kiln.tensor(x_np), kiln.tensor(s_np)
            for got, want in zip(compiled(x.T, s), f(x.T, s)):
                assert_same(got.numpy(), want.numpy(), "output")
    plan = compiled.cache_entries[0].plan
    assert isinstance(plan, runtime.NativePlan) and plan.observed_calls <= 1, plan.observed_calls
