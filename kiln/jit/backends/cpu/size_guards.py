"""What lowering a graph with symbolic sizes to native code assumed of those sizes.

A graph traced with dynamic dims (``dynamic_dims``, or automatic dynamic dims) has shapes
whose sizes are `SymInt`s: they act as the sizes the trace saw, and arithmetic on them builds
expressions (``B*256``). A native plan for such a graph (runtime.py) is lowered once, from
those shapes, and runs for every size:

* every decision the lowering takes on a size (is this product small enough for one thread,
  do these two sizes differ) answers for the traced sizes. `recording_sizes` records each one
  as a guard, kiln's own size-oblivious comparisons too (symbolic.py); the plan runs its code
  only for calls whose sizes answer every guard the same way, and the Python replay for others;
* many of those comparisons answer alike for every size (``B*48 > B``, ``B == 1`` where a dynamic
  dim is never 1): `needed_guards` leaves them out, so a call tests only the rest;
* a size the lowering would turn into a plain number (``int(B)``, an index, text in the C
  source) would bake the traced size into the code. `SymbolicSizeUsed` is raised instead, and
  the node (or the plan) stays in Python.

The code reads the sizes at run time: render/size_text.py spells a size as a C or Python
expression of variables that the segments and the driver set from the call's sizes.
"""
from __future__ import annotations

import operator
from contextlib import contextmanager
from typing import Any, Iterator

from ....trace_state import trace_state
from ...symbolic import Expr, symbols


class SymbolicSizeUsed(Exception):
    """Lowering would have turned a symbolic size into a plain number (and baked the traced size into code)."""


class _SizeRecorder:
    """Stands in for the tracer while a graph with symbolic sizes is lowered (see the module docstring)."""

    guards_every_comparison = True  # (read by symbolic.py)

    def __init__(self) -> None:
        self.shape_guards: list[tuple[Expr, bool]] = []

    def specialize(self, sym: Any, why: str, site: Any) -> None:
        raise SymbolicSizeUsed(f"lowering read the symbolic size {sym.expr} as a plain number ({why})")


@contextmanager
def recording_sizes() -> Iterator[list[tuple[Expr, bool]]]:
    """Within the block, comparisons on symbolic sizes are recorded as (expression, answer) guards in the list
    it yields, and conversions to plain numbers raise `SymbolicSizeUsed`. The active tracer, if any, is set
    aside meanwhile and restored after."""
    saved = trace_state.tracer
    recorder = _SizeRecorder()
    trace_state.tracer = recorder
    try:
        yield recorder.shape_guards
    finally:
        trace_state.tracer = saved


def size_names(values: Any) -> list[str]:
    """The dim names the shapes of `values` depend on, sorted."""
    names: set[str] = set()
    for v in values:
        for d in v.shape:
            names.update(symbols(d))
    return sorted(names)


_COMPARISONS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
                ">=": operator.ge}
MIN_SIZE = 2  # a dynamic dim is symbolic only from 2 on: sizes 0 and 1 get plans of their own (trace.py)


def _linear(e: Any) -> tuple[str | None, int, int] | None:
    """`e` as (symbol, a, c), standing for a * symbol + c, when it is linear in at most one symbol, else None."""
    if isinstance(e, bool) or (not isinstance(e, (int, Expr))):
        return None
    if isinstance(e, int):
        return None, 0, e
    if e.op == "sym":
        return e.args[0], 1, 0
    if e.op == "neg":
        inner = _linear(e.args[0])
        return None if inner is None else (inner[0], -inner[1], -inner[2])
    left, right = _linear(e.args[0]), _linear(e.args[1])
    if left is None or right is None or (left[0] and right[0] and left[0] != right[0]):
        return None
    name = left[0] or right[0]
    if e.op in ("+", "-"):
        sign = 1 if e.op == "+" else -1
        return name, left[1] + sign * right[1], left[2] + sign * right[2]
    if e.op == "*" and (left[0] is None or right[0] is None):  # (a constant times a linear expression)
        const, other = (left[2], right) if left[0] is None else (right[2], left)
        return other[0], other[1] * const, other[2] * const
    return None


def _always(expr: Expr, result: bool) -> bool:
    """Whether the comparison `expr` answers `result` for every size from MIN_SIZE on of the one symbol it is
    linear in (a * B + c against 0 is monotone in B: it answers alike at both ends of the range only if it
    does throughout, and it equals 0 at most at one B)."""
    compare = _COMPARISONS.get(expr.op)
    if compare is None:
        return False
    left, right = _linear(expr.args[0]), _linear(expr.args[1])
    if left is None or right is None or (left[0] and right[0] and left[0] != right[0]):
        return False
    a, c = left[1] - right[1], left[2] - right[2]
    if expr.op in ("==", "!=") and a and -c % a == 0 and -c // a >= MIN_SIZE:
        return False  # (equal to 0 at that one size)
    return all(compare(a * size + c, 0) == result for size in (MIN_SIZE, 1 << 62))


def needed_guards(guards: list[tuple[Expr, bool]], dims: tuple[str, ...]) -> list[tuple[Expr, bool]]:
    """The guards a call must test: ``dim >= MIN_SIZE`` for each dim, then those of `guards` whose answer is
    not the same for every size from there on."""
    floor = [(Expr(">=", Expr.sym(name), MIN_SIZE), True) for name in dims]
    return floor + [(expr, result) for expr, result in guards if not _always(expr, result)]
