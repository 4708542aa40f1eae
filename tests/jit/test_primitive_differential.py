"""Every primitive through both backends: eager, kiln.compile(backend="interpret") and
kiln.compile(backend="cpu") on the same random inputs must agree.

The table (primitive_cases.py) reaches each primitive from user-level kiln code. Each case
draws operands from a seed: broadcasting shapes, size-1 and size-0 dims, transposed, strided
and offset views, float32, float64, int64 and bool where the op takes them, and special
values (NaN, +-inf, -0.0, huge, tiny, subnormal). The op's result goes through a small
chain (``y * 2 + 1``, and a sum over the last axis) so elementwise and row fusion patterns
run too; "big" cases pass 4096 elements, where the fused kernels' vectorized loops run and
where the Python replay (no native runtime) fuses as well. Gradients come from a random
upstream gradient. Each function is called twice: the first call traces, the second replays.

Comparison: bit for bit (values viewed as unsigned integers, so -0.0 != +0.0; NaN equal to
NaN whatever its payload). Where a graph holds a transcendental of tolerances.C_EXPR_ULPS,
the cpu backend (C may call other implementations than NumPy) is held to that many ulps of
the result, widened by the same ulps of the largest finite result magnitude, since a chain
after the op can cancel. Infinities, NaN positions and the interpreter are exact regardless.
Random primitives: from the same seed, the compiled stream equals eager's, call after call.
"""
from __future__ import annotations

import os
import zlib
from typing import Any

import numpy as np
import pytest
from primitive_cases import EXCLUDED, FLOATS, TABLE, Arg, Draw, Entry
from tolerances import C_EXPR_ULPS

import kiln
from kiln.jit.backends import cpu
from kiln.jit.backends.cpu import runtime
from kiln.jit.trace import trace
from kiln.ops.primitive import REGISTRY

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

MODES = ("eager", "interpret", "cpu")
CALLS = 3  # trace; a replay (a new input layout is observed in Python); a replay in the variant made for it


# ---- cases ------------------------------------------------------------------------------------------
def _plan(entry: Entry, slow: bool) -> list[tuple[str, str, str]]:
    """(dtype, size, chain) of each case of one primitive."""
    dtypes = [t for t in entry.dtypes if t in FLOATS] or list(entry.dtypes)
    first, second = dtypes[0], dtypes[-1]
    cases = [(first, "small", "plain"), (second, "small", "affine"), (first, "big", "rows")]
    if entry.empty:
        cases.append((second, "empty", "affine"))
    cases += [(t, "small", "plain") for t in entry.dtypes if t not in dtypes]
    if slow:
        cases += [(t, size, chain) for t in entry.dtypes for size, chain in
                  (("small", "rows"), ("small", "affine"), ("empty", "plain"), ("big", "affine"))
                  if size != "empty" or entry.empty]
    return cases


def _params(slow: bool) -> list:
    out = []
    for name, entry in sorted(TABLE.items()):
        for dtype, size, chain in _plan(entry, slow):
            case_id = f"{name}-{dtype}-{size}-{chain}" + ("-sweep" if slow else "")
            out.append(pytest.param(name, dtype, size, chain, id=case_id))
    return out


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory):
    """One kernel cache for the module (the same kernel is built once), apart from the user's."""
    old = os.environ.get("KILN_CACHE_DIR")
    os.environ["KILN_CACHE_DIR"] = str(tmp_path_factory.mktemp("kernels"))
    yield
    if old is None:
        os.environ.pop("KILN_CACHE_DIR", None)
    else:
        os.environ["KILN_CACHE_DIR"] = old


@pytest.fixture(autouse=True)
def eager_plans(kernel_dir):
    runtime._made.clear()  # native code is generated at once, not after a Python first call


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


def _run(fn, args: list[Arg], mode: str, seed: int, native: bool = True):
    """CALLS calls of fn in `mode` from one RNG seed: per call, output arrays and base gradients."""
    runner = fn
    if mode != "eager":
        runner = kiln.compile(fn, backend=mode)
    saved = cpu.NATIVE_RUNTIME
    cpu.NATIVE_RUNTIME = native
    try:
        kiln.manual_seed(seed)
        calls = []
        for call in range(CALLS):
            made = [a.make() for a in args]
            leaves = [leaf for (leaf, _), a in zip(made, args) if a.grad]
            with np.errstate(all="ignore"):
                outs = _flatten(runner(*[view for _, view in made]))
                values = [o.detach().numpy().copy() for o in outs]
                grads: list = []
                diff = [o for o in outs if o.requires_grad]
                if leaves and diff:
                    rng = np.random.default_rng(seed + call)
                    ups = [kiln.tensor(rng.standard_normal(o.shape).astype(o.dtype.name)) for o in diff]
                    grads = kiln.autograd.grad(diff, leaves, grad_outputs=ups, allow_unused=True)
                    grads = [None if g is None else g.numpy().copy() for g in grads]
            calls.append((values, grads))
    finally:
        cpu.NATIVE_RUNTIME = saved
    return calls, runner


def _graph_prims(compiled, fn, args: list[Arg]) -> set[str]:
    """The primitives in the compiled plans' graphs and in the unoptimized trace (constants fold away)."""
    with np.errstate(all="ignore"):
        names = {n.prim.name for n in trace(fn, tuple(a.make()[1] for a in args)).graph.nodes}
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


def assert_same(got: np.ndarray, want: np.ndarray, what: str, ulps: int = 0) -> None:
    """got equals want bit for bit (NaN payloads aside), or within `ulps` (see the module docstring)."""
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
    differ = _bits(got) != _bits(want)
    if ulps and got.dtype.kind == "f" and differ.any():
        finite = np.isfinite(want) & np.isfinite(got)
        scale = float(np.abs(want[finite]).max()) if finite.any() else 0.0
        allowed = ulps * (np.spacing(np.abs(want).astype(want.dtype)) + np.spacing(want.dtype.type(scale)))
        with np.errstate(all="ignore"):
            near = finite & (np.abs(got.astype(np.float64) - want) <= allowed)
        differ &= ~near
    if differ.any():
        where = np.flatnonzero(differ)[:4]
        raise AssertionError(f"{what}: {int(differ.sum())} of {differ.size} elements differ"
                             f"{f' by more than {ulps} ulps' if ulps else ''}, e.g. at flat {where.tolist()}: "
                             f"{got.reshape(-1)[where].tolist()} vs {want.reshape(-1)[where].tolist()}")


def _compare(got, want, what: str, ulps: int = 0) -> None:
    for call, ((gv, gg), (wv, wg)) in enumerate(zip(got, want)):
        assert len(gv) == len(wv), f"{what}: {len(gv)} outputs vs {len(wv)}"
        for i, (g, w) in enumerate(zip(gv, wv)):
            assert_same(g, w, f"{what}, call {call} output {i}", ulps)
        assert len(gg) == len(wg), f"{what}, call {call}: {len(gg)} gradients vs {len(wg)}"
        for i, (g, w) in enumerate(zip(gg, wg)):
            assert (g is None) == (w is None), f"{what}, call {call}: gradient {i} is None on one side only"
            if g is not None:
                assert_same(g, w, f"{what}, call {call} gradient of operand {i}", ulps)


def check_case(name: str, dtype: str, size: str, chain: str, tag: str = "", **draw_options: Any) -> None:
    """Draw the case's operands from its seed, run it in every mode and compare."""
    entry = TABLE[name]
    seed = zlib.crc32(f"{name} {dtype} {size} {chain} {tag}".encode())
    draw = Draw(np.random.default_rng(seed), dtype, size, grad=entry.grad, **draw_options)
    fn, args = entry.build(draw)
    fn = _chain(fn, chain, draw.float)
    label = f"{name}({', '.join(map(repr, args))}) {chain}"
    eager, _ = _run(fn, args, "eager", seed)
    interp, interp_fn = _run(fn, args, "interpret", seed)
    prims = _graph_prims(interp_fn, fn, args)
    assert name in prims, f"{label}: the traced graphs hold {sorted(prims)}, not {name}"
    ulps = max([C_EXPR_ULPS[p].get(draw.float, 0) for p in prims if p in C_EXPR_ULPS], default=0)
    _compare(interp, eager, f"{label}: interpret vs eager")
    native, _ = _run(fn, args, "cpu", seed)
    _compare(native, interp, f"{label}: cpu vs interpret", ulps)
    _compare(native, eager, f"{label}: cpu vs eager", ulps)
    if size == "big":  # the Python replay, with fused kernels past fusion.MIN_ELEMENTS
        replay, _ = _run(fn, args, "cpu", seed, native=False)
        _compare(replay, interp, f"{label}: cpu (no native runtime) vs interpret", ulps)


# ---- tests ---------------------------------------------------------------------------------------
def test_every_primitive_is_in_the_table_or_excluded_with_a_reason():
    missing = sorted(set(REGISTRY) - set(TABLE) - set(EXCLUDED))
    assert not missing, f"primitives with no differential case: {missing}; add them to primitive_cases.TABLE"
    both = sorted(set(TABLE) & set(EXCLUDED))
    assert not both, f"both in the table and excluded: {both}"
    stale = sorted((set(TABLE) | set(EXCLUDED)) - set(REGISTRY))
    assert not stale, f"not primitives (renamed or removed?): {stale}"
    assert all(len(reason) > 20 for reason in EXCLUDED.values())


@pytest.mark.parametrize("name, dtype, size, chain", _params(slow=False))
def test_primitive_agrees_across_backends(name, dtype, size, chain):
    check_case(name, dtype, size, chain)


@pytest.mark.slow
@pytest.mark.parametrize("name, dtype, size, chain", _params(slow=True))
def test_primitive_agrees_across_backends_sweep(name, dtype, size, chain):
    check_case(name, dtype, size, chain, tag="sweep")


@pytest.mark.parametrize("name, spelling", [
    ("maximum", "(({0} >= {1} || {1} != {1}) ? {0} : {1})"),  # NaN does not win, and max(0.0, -0.0) is 0.0
    ("neg", "(0 - {0})"),  # -(+0.0) is -0.0, but 0 - 0.0 is +0.0
])
def test_a_wrong_c_spelling_is_caught(monkeypatch, name, spelling):
    """Not vacuous: C that is wrong only on special values fails the comparison with the interpreter
    (on contiguous inputs, which the first native variant reads)."""
    from kiln.jit.backends.render import C

    monkeypatch.setitem(type(C).ops, name, spelling)
    caught = []
    for draw in range(4):
        try:
            check_case(name, "float32", "big", "plain", tag=f"mutant {draw}", views=("C",))
        except AssertionError as exc:
            caught.append(str(exc))
    assert caught and all("cpu vs interpret" in c for c in caught), caught


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
