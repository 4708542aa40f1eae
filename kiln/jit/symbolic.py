"""Symbolic dimensions for `dynamic_dims`: ints that remember how they were computed.

While tracing with ``dynamic_dims={0: {0: "B"}}``, ``x.shape[0]`` is a `SymInt`: it
behaves as the concrete size seen at trace time, but arithmetic on it builds an
expression (``B*2``, ``B*T//4``) that a compiled plan re-evaluates for each call's
sizes. Static op params holding such values are resolved with `resolve`.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

from ..ops.primitive import trace_state

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
    "%": operator.mod, "/": operator.truediv,
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge,
}


class Expr:
    """An arithmetic expression over named dims."""

    __slots__ = ("op", "args")

    def __init__(self, op: str, *args: Any):
        self.op = op
        self.args = args

    @staticmethod
    def sym(name: str) -> "Expr":
        return Expr("sym", name)

    def evaluate(self, env: dict[str, int]) -> Any:
        if self.op == "sym":
            return env[self.args[0]]
        if self.op == "neg":
            return -_eval(self.args[0], env)
        return _OPS[self.op](_eval(self.args[0], env), _eval(self.args[1], env))

    def __str__(self) -> str:
        if self.op == "sym":
            return self.args[0]
        if self.op == "neg":
            return f"-{_str(self.args[0])}"
        return f"{_str(self.args[0])}{self.op}{_str(self.args[1])}"

    __repr__ = __str__


def _eval(x: Any, env: dict[str, int]) -> Any:
    return x.evaluate(env) if isinstance(x, Expr) else x


def _str(x: Any) -> str:
    if isinstance(x, Expr) and x.op not in ("sym", "neg"):
        return f"({x})"
    return str(x)


def _expr_of(x: Any) -> Any:
    e = getattr(x, "expr", None)
    return e if e is not None else x


def _binop(op: str, reflected: bool = False) -> Callable:
    fn = _OPS[op]

    def method(self: Any, other: Any) -> Any:
        if not isinstance(other, (int, float)) or isinstance(other, bool):
            return NotImplemented
        a, b = (other, self) if reflected else (self, other)
        value = fn(_plain(a), _plain(b))
        expr = simplify(op, _expr_of(a), _expr_of(b))
        if isinstance(value, bool):
            return value
        if not isinstance(expr, Expr):  # the symbols cancelled: a plain number
            return expr
        if isinstance(value, int):
            return SymInt(value, expr)
        return SymFloat(value, expr)

    return method


def _monomial(e: Any) -> tuple[Any, tuple[str, ...]] | None:
    """e as (integer coefficient, sorted symbol names) when it is a product of symbols and ints."""
    if isinstance(e, int) and not isinstance(e, bool):
        return e, ()
    if isinstance(e, Expr):
        if e.op == "sym":
            return 1, (e.args[0],)
        if e.op == "*":
            left, right = _monomial(e.args[0]), _monomial(e.args[1])
            if left is not None and right is not None:
                return left[0] * right[0], tuple(sorted(left[1] + right[1]))
    return None


def _from_monomial(coef: int, syms: tuple[str, ...]) -> Any:
    if coef == 0 or not syms:
        return coef
    out: Any = Expr.sym(syms[0])
    for name in syms[1:]:
        out = Expr("*", out, Expr.sym(name))
    return out if coef == 1 else Expr("*", coef, out)


def simplify(op: str, a: Any, b: Any) -> Any:
    """Expr(op, a, b) with products of symbols kept in one canonical form and exact divisions
    cancelled, so that ``x.reshape(B, -1)`` gives ``12`` rather than ``((B*3)*4)//B``."""
    if op in ("*", "//"):
        ma, mb = _monomial(a), _monomial(b)
        if ma is not None and mb is not None:
            if op == "*":
                return _from_monomial(ma[0] * mb[0], tuple(sorted(ma[1] + mb[1])))
            rest = list(ma[1])
            if mb[0] != 0 and ma[0] % mb[0] == 0 and all(rest.count(n) >= mb[1].count(n) for n in set(mb[1])):
                for name in mb[1]:
                    rest.remove(name)
                return _from_monomial(ma[0] // mb[0], tuple(rest))
    if op in ("+", "-") and isinstance(b, int) and b == 0:
        return a
    if op == "+" and isinstance(a, int) and a == 0:
        return b
    return Expr(op, a, b)


def _compare(op: str) -> Callable:
    """A comparison that answers for the traced sizes and records that answer as a shape guard.

    Python code branching on a symbolic size (``if n == 1``, ``min(step, n - k)``) bakes the
    branch it took into the plan; the guard makes the plan retrace for sizes that would
    branch the other way (see `guards_hold`).
    """
    fn = _OPS[op]
    equality = op in ("==", "!=")

    def method(self: Any, other: Any) -> Any:
        if not isinstance(other, (int, float)):
            return NotImplemented
        a, b = _plain(self), _plain(other)
        result = fn(a, b)
        other_expr = _expr_of(other)
        # Sizes that differ while tracing are taken to differ for every size (as PyTorch's
        # size-oblivious checks do): shape checks compare B with other dims all the time, and a
        # guard on each would retrace whenever B happened to equal one of them. Equal sizes,
        # and every ordering, are guarded.
        if not (equality and a != b) and str(self.expr) != str(other_expr):
            _record_guard(Expr(op, self.expr, other_expr), result)
        return result

    return method


def _truth(self: Any) -> bool:
    result = _plain(self) != 0
    _record_guard(Expr("!=", self.expr, 0), result)
    return result


def _record_guard(expr: Expr, result: bool) -> None:
    guards = getattr(trace_state.tracer, "shape_guards", None)
    if guards is not None:
        guards.append((expr, result))


def guards_hold(guards: Any, env: dict[str, int] | None) -> bool:
    """Whether every recorded comparison answers the same for this call's sizes."""
    if not guards or env is None:
        return True
    try:
        return all(bool(expr.evaluate(env)) == result for expr, result in guards)
    except (ArithmeticError, KeyError):  # e.g. a division by a size that is 0 now
        return False


def unique_guards(guards: list) -> tuple:
    """The distinct guards of a trace, in order (one branch is often tested many times)."""
    seen: dict[tuple, tuple] = {}
    for expr, result in guards:
        seen.setdefault((str(expr), result), (expr, result))
    return tuple(seen.values())


def _plain(x: Any) -> Any:
    """The concrete number behind a symbolic one (plain numbers pass through)."""
    if isinstance(x, SymInt):
        return int(x)
    if isinstance(x, SymFloat):
        return float(x)
    return x


class _SymbolicNumber:
    """Operators shared by SymInt and SymFloat: arithmetic builds expressions, comparisons
    answer with the concrete values (recording shape guards while tracing)."""

    expr: Expr

    def __repr__(self) -> str:
        return str(self.expr)

    __str__ = __repr__
    __add__ = _binop("+")
    __radd__ = _binop("+", True)
    __sub__ = _binop("-")
    __rsub__ = _binop("-", True)
    __mul__ = _binop("*")
    __rmul__ = _binop("*", True)
    __truediv__ = _binop("/")
    __rtruediv__ = _binop("/", True)
    __eq__ = _compare("==")
    __ne__ = _compare("!=")
    __lt__ = _compare("<")
    __le__ = _compare("<=")
    __gt__ = _compare(">")
    __ge__ = _compare(">=")
    __bool__ = _truth


class SymInt(_SymbolicNumber, int):
    """An int that carries an expression over symbolic dims."""

    def __new__(cls, value: int, expr: Expr) -> "SymInt":
        obj = int.__new__(cls, value)
        obj.expr = expr
        return obj

    __floordiv__ = _binop("//")
    __rfloordiv__ = _binop("//", True)
    __mod__ = _binop("%")

    def __neg__(self) -> "SymInt":
        return SymInt(-int(self), Expr("neg", self.expr))

    def __hash__(self) -> int:
        return int.__hash__(self)


class SymFloat(_SymbolicNumber, float):
    """A float computed from symbolic dims (e.g. 1 / B)."""

    def __new__(cls, value: float, expr: Expr) -> "SymFloat":
        obj = float.__new__(cls, value)
        obj.expr = expr
        return obj

    def __hash__(self) -> int:
        return float.__hash__(self)


def is_symbolic(x: Any) -> bool:
    """True when x (or anything nested in a tuple/list/dict) is a SymInt or SymFloat."""
    if isinstance(x, (SymInt, SymFloat)):
        return True
    if isinstance(x, (tuple, list)):
        return any(is_symbolic(i) for i in x)
    if isinstance(x, dict):
        return any(is_symbolic(v) for v in x.values())
    return False


def resolve(x: Any, env: dict[str, int]) -> Any:
    """x with every symbolic value evaluated for the dim sizes in `env`."""
    if isinstance(x, SymInt):
        return int(x.expr.evaluate(env))
    if isinstance(x, SymFloat):
        return float(x.expr.evaluate(env))
    if isinstance(x, tuple):
        return tuple(resolve(i, env) for i in x)
    if isinstance(x, list):
        return [resolve(i, env) for i in x]
    if isinstance(x, dict):
        return {k: resolve(v, env) for k, v in x.items()}
    return x
