"""Sizes of a plan made for every size of its dynamic dims, spelled as C and Python expressions.

A native plan lowered from symbolic shapes (cpu/size_guards.py) holds its sizes and offsets as
SymInts, expressions of the named dims (``B*256``). Its segments and its Python driver read the
call's sizes into variables (`dim_variable`) and compute each size from them: `c_size` spells one
in C (as the segment IR holds it), `py_size` in Python, `guard_source` the test that a call's sizes
answer every comparison the lowering made as the traced sizes did.
"""
from __future__ import annotations

from typing import Any

from ...symbolic import Expr, SymInt

DIM_PREFIX = "kiln_dim_"


class UnspellableSize(ValueError):
    """A size that has no integer spelling (computed with true division, or not an integer)."""


def dim_variable(name: str) -> str:
    """The C and Python variable holding the size of dim `name` in a plan's code (`name` may be any text)."""
    safe = "".join(c if c.isascii() and c.isalnum() else f"_{ord(c):x}_" for c in name)
    return DIM_PREFIX + safe


def _spell(e: Any, c: bool) -> str:
    if isinstance(e, Expr):
        if e.op == "sym":
            return dim_variable(e.args[0])
        if e.op == "neg":
            return f"(-{_spell(e.args[0], c)})"
        if e.op in ("+", "-", "*") or (e.op == "/" and not c):
            op = e.op
        elif e.op in ("//", "%"):  # (sizes are not negative: C's division truncates as Python's floors)
            op = ("/" if e.op == "//" else "%") if c else e.op
        else:
            raise UnspellableSize(f"a size computed with {e.op!r} ({e}) has no integer spelling")
        return f"({_spell(e.args[0], c)} {op} {_spell(e.args[1], c)})"
    if isinstance(e, float) and not c:  # (a guard may compare a size with a float)
        return repr(e)
    if isinstance(e, bool) or not isinstance(e, int):
        raise UnspellableSize(f"a size that is not an integer: {e!r}")
    return str(e)


def c_size(x: Any) -> Any:
    """A size as the segment IR holds it: a plain int stays one, a SymInt becomes the C expression of its value."""
    if isinstance(x, SymInt):
        return _spell(x.expr, True)
    return int(x)


def py_size(x: Any) -> str:
    """A size as a Python expression of the driver (a plain int as its digits)."""
    return _spell(x.expr, False) if isinstance(x, SymInt) else str(int(x))


def guard_source(guards: list[tuple[Expr, bool]]) -> str:
    """A Python expression that is true when the call's sizes answer every guard as the trace's did ("True"
    with no guards); unique guards only."""
    seen: dict[str, None] = {}
    for expr, result in guards:
        left, right = _spell(expr.args[0], False), _spell(expr.args[1], False)
        test = f"({left} {expr.op} {right})"
        seen.setdefault(test if result else f"not {test}", None)
    return " and ".join(seen) or "True"
