"""Differential testing: run a program eagerly and compiled, and compare everything observable.

For each backend in kiln.jit.backends.BACKENDS the program is compiled once and
called twice: the first call traces, the second replays the cached plan on fresh
input values. Each call is compared with an eager run on the same inputs:
outputs (shape, dtype, requires_grad, values, NaN and inf positions), the
gradients of every input after backward with a fixed random cotangent, and the
inputs' contents afterwards (in-place updates). The first call's outputs are
checked again after the second call: a plan must not reuse memory it returned.
Then the program is compiled with dynamic_dims (its leading size symbolic) and
called at B, B + 1 and 2B + 1.

Values match within a per-dtype tolerance, widened element by element to what
ulp-sized rounding noise does to eager results (see `rounding_noise`): near a
cancellation, a fused kernel or another summation order is legitimately further
off than any fixed tolerance. NaN and inf positions must match exactly.
"""
from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

import kiln
from kiln.jit.backends import BACKENDS
from kiln.ops.primitive import REGISTRY

from .programs import Program, dynamic_variant, make_inputs, program_function

# (rtol, atol) per dtype: the interpreter runs eager's kernels, so only summation order
# (gradient accumulation) differs there; fused C kernels round a little differently.
TOLERANCE = {"float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12), "float16": (1e-2, 1e-3)}
CALLS = 2  # trace, then replay with fresh values


@dataclass
class Run:
    """What one call made observable: outputs, input grads and input contents afterwards."""

    error: str | None = None
    outputs: list = field(default_factory=list)  # (shape, dtype, requires_grad, array copy or value)
    grads: list = field(default_factory=list)  # per input leaf: array copy or None
    inputs_after: list = field(default_factory=list)  # per input leaf: array copy
    tensors: list = field(default_factory=list)  # the output tensors themselves
    aliases: list = field(default_factory=list)  # see alias_relations


def _snapshot(x: Any) -> Any:
    if isinstance(x, kiln.Tensor):
        return (tuple(x.shape), x.dtype.name, bool(x.requires_grad), np.array(x.detach().numpy(), copy=True))
    return ("python", type(x).__name__, False, x)


def alias_relations(outs: list, others: list) -> list:
    """For each output tensor: which outputs and inputs (leaf bases, then arguments) it *is*, and
    which it may share memory with. A replay must return the same relations as eager."""
    every = [o for o in outs if isinstance(o, kiln.Tensor)] + list(others)
    return [(tuple(u is t for u in every), tuple(bool(np.may_share_memory(u._data, t._data)) for u in every))
            for t in outs if isinstance(t, kiln.Tensor)]


def cotangent(shape: tuple, dtype: str, seed: Any) -> kiln.Tensor:
    """The fixed random upstream gradient for one output."""
    rng = np.random.default_rng(seed)
    return kiln.from_numpy(rng.standard_normal(shape).astype(dtype))


@contextlib.contextmanager
def rounding_noise(seed: int) -> Iterator[None]:
    """Eager execution with float values nudged by up to two ulps: every (non-view) primitive's
    result, and every gradient contribution a VJP hands on (pass-through ones included).

    Runs under it show how far rounding differences can move each result of a program:
    the slack a compiled plan that rounds differently (fused C, another order of summing
    gradient contributions) is allowed where a cancellation amplifies them. Nudging the
    contributions matters where eager cancels exactly (g - g) and a reordered sum does not.
    """
    rng = np.random.default_rng(seed)

    def nudge(a: Any) -> Any:
        # a kernel's 0-d result is often a NumPy scalar (np.exp of a 0-d array): nudged too, and kept a scalar
        if isinstance(a, (np.ndarray, np.floating)) and a.dtype.kind == "f" and a.size:
            # a relative step in [eps, 2 eps] of either sign: at least an ulp (smaller steps often round
            # back unchanged), and never the same step twice (cancellations show their sensitivity)
            eps = np.finfo(a.dtype).eps
            step = rng.uniform(eps, 2 * eps, a.shape) * np.where(rng.random(a.shape) < 0.5, -1.0, 1.0)
            nudged = np.asarray((a * (1 + step)).astype(a.dtype))  # (a 0-d product is a NumPy scalar)
            return nudged[()] if isinstance(a, np.floating) else nudged
        return a

    patched = []
    for prim in REGISTRY.values():
        if "kernel" in prim.__dict__ or "vjp" in prim.__dict__:
            continue
        if not prim.is_view:
            def kernel(xp: Any, *arrays: Any, _kernel: Callable = prim.kernel, **params: Any) -> Any:
                return nudge(_kernel(xp, *arrays, **params))

            prim.kernel = kernel

        def vjp(g: Any, inputs: Any, node: Any, _vjp: Callable = prim.vjp, **params: Any) -> Any:
            return tuple(gi if not isinstance(gi, kiln.Tensor) else kiln.Tensor._wrap(nudge(gi._data), gi._device)
                         for gi in _vjp(g, inputs, node, **params))

        prim.vjp = vjp
        patched.append(prim)
    try:
        yield
    finally:
        for prim in patched:
            prim.__dict__.pop("kernel", None)
            del prim.vjp


class RoundingSpread:
    """Eager runs of a program under `rounding_noise` (three seeds), per call, computed on demand."""

    def __init__(self, program: Program):
        self.program = program
        self.fn = program_function(program)
        self.runs: dict[int, list[Run]] = {}

    def __call__(self, call: int) -> list[Run]:
        if call not in self.runs:
            self.runs[call] = []
            for seed in (1, 2, 3):
                with rounding_noise(seed):
                    self.runs[call].append(run_call(self.fn, self.program, call))
        return self.runs[call]


def run_call(fn: Callable, program: Program, call: int) -> Run:
    """Call `fn` (eager or compiled) on fresh inputs for `call`, then backward; record everything."""
    bases, args = make_inputs(program, call)
    run = Run()
    kiln.manual_seed(1000 + call)
    grad_mode = kiln.no_grad() if program.no_grad else contextlib.nullcontext()
    try:
        with grad_mode:
            outs = fn(*args)
    except Exception as exc:  # noqa: BLE001 - an error is an outcome to compare
        run.error = f"{type(exc).__name__}: {exc}"
        return run
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    run.tensors = outs
    run.outputs = [_snapshot(o) for o in outs]
    run.aliases = alias_relations(outs, bases + args)
    diff = [(k, o) for k, o in enumerate(outs) if isinstance(o, kiln.Tensor) and o.requires_grad]
    if diff:
        try:
            loss = None
            for k, o in diff:
                term = (o * cotangent(tuple(o.shape), o.dtype.name, [program.seed, call, k])).sum()
                loss = term if loss is None else loss + term
            loss.backward()
        except Exception as exc:  # noqa: BLE001
            run.error = f"backward: {type(exc).__name__}: {exc}"
            return run
    run.grads = [None if b.grad is None else np.array(b.grad.numpy(), copy=True) for b in bases]
    run.inputs_after = [np.array(b.detach().numpy(), copy=True) for b in bases]
    return run


def _show(got: np.ndarray, want: np.ndarray, bad: np.ndarray) -> str:
    """The first few differing elements: index, compiled value, eager value."""
    if got.ndim == 0:
        got, want, bad = got.reshape(1), want.reshape(1), bad.reshape(1)
    where = np.argwhere(bad)
    lines = [f"    at {tuple(int(i) for i in idx)}: compiled {got[tuple(idx)].item()!r}, eager {want[tuple(idx)].item()!r}"
             for idx in where[:4]]
    if len(where) > 4:
        lines.append(f"    ... {len(where)} elements differ (of {got.size})")
    return "\n".join(lines)


def compare_arrays(what: str, got: np.ndarray, want: np.ndarray, noisy: Callable[[], Any] | None = None) -> str | None:
    """None if equal within tolerance with identical NaN and inf positions, else a description.

    `noisy()` gives the same value from eager runs whose every op result was nudged by an
    ulp (or None). Elements outside the tolerance still pass when they differ by no more
    than some times what that nudging did: a cancellation amplifies rounding differences
    (another summation order, another libm) beyond any fixed tolerance, in eager code too.
    """
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"{what}: shape {got.shape}, eager {want.shape}"
    if got.dtype != want.dtype:
        return f"{what}: dtype {got.dtype}, eager {want.dtype}"
    if got.dtype.kind != "f":
        bad = got != want
        return f"{what}: values differ\n{_show(got, want, bad)}" if bad.any() else None
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    if not np.array_equal(nan_g, nan_w):
        return f"{what}: NaN positions differ\n{_show(got, want, nan_g != nan_w)}"
    inf_g, inf_w = np.isinf(got), np.isinf(want)
    if not np.array_equal(inf_g, inf_w) or not np.array_equal(got[inf_g], want[inf_w]):
        return f"{what}: inf positions differ\n{_show(got, want, (inf_g != inf_w) | (inf_g & (got != want)))}"
    finite = ~(nan_g | inf_g)
    rtol, atol = TOLERANCE.get(got.dtype.name, (1e-5, 1e-6))
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    with np.errstate(all="ignore"):
        bad = finite & ~(np.abs(g64 - w64) <= atol + rtol * np.abs(w64))
    if not bad.any():
        return None
    spread = noisy() if noisy is not None else None
    if spread:
        with np.errstate(all="ignore"):
            moved = np.max([np.abs(np.asarray(n, dtype=np.float64) - w64) for n in spread], axis=0)
            # nudges can cancel out in a few elements by chance: no element gets less slack than the
            # typical relative movement of the whole result (which shows the precision it is computed in)
            relative = moved[finite] / np.maximum(np.abs(w64[finite]), np.finfo(np.float64).tiny)
            typical = float(np.percentile(relative[np.isfinite(relative)], 90)) if relative.size else 0.0
            slack = 32 * np.maximum(moved, typical * np.abs(w64))
            explained = np.abs(g64 - w64) <= slack + atol + rtol * np.abs(w64)
        bad &= ~(explained & np.isfinite(slack))
        if not bad.any():
            return None
    err = float(np.max(np.abs(g64 - w64)[bad]))
    return f"{what}: values differ (max abs error {err:.3g})\n{_show(got, want, bad)}"


def _eager_version_error(run: Run) -> bool:
    """Eager backward refused a tensor saved for backward and then modified in place.

    The compiled plan keeps its own copy of every saved value (functionalized), so it
    computes the gradient of the function as written; that is more, not wrong.
    """
    return run.error is not None and run.error.startswith("backward:") and "modified by an inplace" in run.error


def compare_runs(label: str, got: Run, want: Run, noisy: Callable[[], list[Run]] | None = None,
                 aliases: bool = True) -> list[str]:
    """Every difference between a compiled call and the eager call on the same inputs (with
    `aliases`, also which outputs are, or share memory with, each other and the inputs)."""
    if want.error is not None or got.error is not None:
        if want.error is None:
            return [f"{label}: compiled raised {got.error}; eager did not"]
        if got.error is None:
            if _eager_version_error(want):
                return []
            return [f"{label}: eager raised {want.error}; compiled did not"]
        same = got.error.split(":")[0] == want.error.split(":")[0]
        return [] if same else [f"{label}: compiled raised {got.error}; eager raised {want.error}"]

    def reference(kind: str, k: int) -> Callable[[], Any]:
        def get() -> Any:
            runs = noisy() if noisy is not None else None
            if runs is None or any(r.error is not None for r in runs):
                return None
            try:
                arrays = [r.outputs[k][3] if kind == "output" else r.grads[k] for r in runs]
            except IndexError:
                return None
            shape = np.shape(want.outputs[k][3] if kind == "output" else want.grads[k])
            return arrays if all(a is not None and np.shape(a) == shape for a in arrays) else None
        return get

    problems = []
    if len(got.outputs) != len(want.outputs):
        return [f"{label}: {len(got.outputs)} outputs, eager {len(want.outputs)}"]
    if aliases and got.aliases != want.aliases:
        problems.append(f"{label}: outputs alias differently from eager's: (is, may share memory with) each "
                        f"output and input: compiled {got.aliases}, eager {want.aliases}")
    for k, (g, w) in enumerate(zip(got.outputs, want.outputs)):
        if g[0] == "python" or w[0] == "python":
            if g != w:
                problems.append(f"{label} output {k}: {g[1]} {g[3]!r}, eager {w[1]} {w[3]!r}")
            continue
        if g[:3] != w[:3]:
            problems.append(f"{label} output {k}: (shape, dtype, requires_grad) {g[:3]}, eager {w[:3]}")
            continue
        msg = compare_arrays(f"{label} output {k}", g[3], w[3], reference("output", k))
        if msg:
            problems.append(msg)
    for i, (g, w) in enumerate(zip(got.grads, want.grads)):
        if (g is None) != (w is None):
            problems.append(f"{label} grad of input {i}: compiled {'None' if g is None else 'set'}, "
                            f"eager {'None' if w is None else 'set'}")
        elif g is not None:
            msg = compare_arrays(f"{label} grad of input {i}", g, w, reference("grad", i))
            if msg:
                problems.append(msg)
    for i, (g, w) in enumerate(zip(got.inputs_after, want.inputs_after)):
        msg = compare_arrays(f"{label} input {i} after the call", g, w)
        if msg:
            problems.append(msg)
    return problems


@dataclass
class Result:
    """The verdict on one program: the mismatches found (empty: it passed), and how it ran."""

    mismatches: list[str]
    eager_error: str | None = None  # the eager run raised (compiled must raise the same)
    fallback: bool = False  # some backend fell back to eager for this signature


def check_program(program: Program, backends: list[str] | None = None, dynamic: bool = True) -> Result:
    """Compare eager and compiled runs of `program` on every backend (and with dynamic_dims)."""
    fn = program_function(program)
    problems: list[str] = []
    eager_error = None
    fallback = False
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        eager = [run_call(fn, program, call) for call in range(CALLS)]
        eager_error = eager[0].error
        spread = RoundingSpread(program)

        for name in backends or list(BACKENDS):
            compiled = kiln.compile(fn, backend=name)
            runs = []
            for call in range(CALLS):
                runs.append(run_call(compiled, program, call))
                problems += compare_runs(f"[{name}] call {call}", runs[-1], eager[call],
                                         lambda call=call: spread(call), aliases=not said_shared(compiled))
            first = runs[0]
            for k, (t, snap) in enumerate(zip(first.tensors, first.outputs)):
                if isinstance(t, kiln.Tensor) and first.error is None:
                    msg = compare_arrays(f"[{name}] call 0 output {k} after call 1", t.detach().numpy(), snap[3])
                    if msg:
                        problems.append(msg + " (the plan reused memory it had returned)")
            stats = compiled.stats
            fallback = fallback or stats.fallbacks > 0
            returned = sum(run.error is None for run in runs)  # stats count only the calls that returned
            if eager_error is None and stats.hits + stats.misses + stats.fallbacks != returned:
                problems.append(f"[{name}] stats do not add up over the {returned} calls that returned: {stats!r}")
        lazy = kiln.djit(fn)  # records ops and runs them as plans where Python needs a value
        for call in range(CALLS):
            problems += compare_runs(f"[djit] call {call}", run_call(lazy, program, call), eager[call],
                                     lambda call=call: spread(call))
        if eager_error is None and dynamic:
            problems += check_dynamic(program, backends, eager[0])
    return Result(problems, eager_error, fallback)


def said_shared(compiled: Any) -> bool:
    """Whether kiln.compile warned that outputs sharing memory in eager come back separate (the one
    aliasing a replay does not rebuild, and says so)."""
    return any(tag.startswith("shared outputs") for tag in compiled._warned)


GROWTH = {"B+1": lambda b: b + 1, "2B+1": lambda b: 2 * b + 1}  # the other sizes a dynamic plan is called at


def check_dynamic(program: Program, backends: list[str] | None, eager: Run) -> list[str]:
    """Compile with dynamic_dims (one symbolic size "B"); call at B, B + 1 and 2B + 1; compare with eager."""
    variants = []
    for label, grow in GROWTH.items():
        variant = dynamic_variant(program, grow)
        if variant is None:
            return []
        dims, grown = variant
        grown_eager = run_call(program_function(grown), grown, 1)
        if grown_eager.error is None:  # else the ops do not fit that size: nothing to compare
            variants.append((label, grown, grown_eager, RoundingSpread(grown)))
    if not variants:
        return []
    fn = program_function(program)
    spread = RoundingSpread(program)
    problems = []
    for name in backends or list(BACKENDS):
        compiled = kiln.compile(fn, backend=name, dynamic_dims=dims)
        label = f"[{name} dynamic_dims={dims}]"
        got = run_call(compiled, program, 0)
        problems += compare_runs(f"{label} call at B", got, eager, lambda: spread(0), aliases=not said_shared(compiled))
        for size, grown, grown_eager, grown_spread in variants:
            got = run_call(compiled, grown, 1)
            problems += compare_runs(f"{label} call at {size}", got, grown_eager,
                                     lambda grown_spread=grown_spread: grown_spread(1),
                                     aliases=not said_shared(compiled))
    return problems
