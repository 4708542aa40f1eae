"""Symbolic dimensions for `dynamic_dims`: sizes that remember how they were computed.

While tracing with ``dynamic_dims={0: {0: "B"}}``, ``x.shape[0]`` is a `SymInt`: it
behaves as the concrete size seen at trace time, but arithmetic on it builds an
expression (``B*2``, ``B*T//4``) that a compiled plan re-evaluates for each call's
sizes. Static op params holding such values are resolved with `resolve`.

Turning a symbolic size into a plain Python value while tracing *specializes* the
plan: ``int(B)``, ``float(B)``, ``round``/``math.floor``/``math.ceil``/``math.trunc``,
float math such as ``math.sqrt(B)``, NumPy conversions (``np.prod(x.shape)``,
``np.asarray(B)``, ``np.int64(B)``), text (``str(B)``, ``repr(B)``, f-strings,
``format``, ``'%s' % B``) and the int operators that have no symbolic form (``**``,
``<<``, ``&``, ``abs``...). The size is pinned by a shape guard ``B == <traced size>``,
so a call at another size retraces instead of reusing the plan, and the active tracer
warns once per source line (`Tracer.specialize`). While tracing, text made by user code
is eager's digits ("32"); kiln's own text (graph dumps, messages) and any text made
outside a trace is the expression ("B", "2*B"; `dim_text` asks for it explicitly). kiln's
own code reads a traced size without specializing through `concrete`.

SymInt and SymFloat are not subclasses of int and float, as PyTorch's SymInt is not:
CPython and NumPy read an int subclass's value in C without calling any of its methods,
so ``range(B)``, ``np.zeros(B)``, ``seq[:B]`` or ``math.log(B)`` would bake the traced
size in silently. As plain objects they reach ``__index__``, ``__int__``, ``__float__`` or
``__array__``, which specialize. Code that accepts sizes asks `kiln.sizes.is_int`.
"""
from __future__ import annotations

import math
import numbers
import operator
import os
import sys
import sysconfig
from typing import Any, Callable, Mapping

import numpy as np

from ..trace_state import trace_state
from ..sizes import SymbolicNumber, concrete  # noqa: F401 (concrete: re-exported)

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
    "%": operator.mod, "/": operator.truediv,
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge,
}

class Expr:
    """An arithmetic expression over named dims."""

    __slots__ = ("op", "args", "_text")

    def __init__(self, op: str, *args: Any):
        self.op = op
        self.args = args
        self._text: str | None = None  # (str() is asked often: each comparison of two sizes compares their texts)

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
        if self._text is None:
            if self.op == "sym":
                self._text = self.args[0]
            elif self.op == "neg":
                self._text = f"-{_str(self.args[0])}"
            else:
                self._text = f"{_str(self.args[0])}{self.op}{_str(self.args[1])}"
        return self._text

    __repr__ = __str__


def symbols(x: Any) -> list[str]:
    """The dim names an expression (or a SymInt/SymFloat) depends on, in order of appearance."""
    x = _expr_of(x)
    if not isinstance(x, Expr):
        return []
    if x.op == "sym":
        return [x.args[0]]
    names: list[str] = []
    for a in x.args:
        names += [n for n in symbols(a) if n not in names]
    return names


def _eval(x: Any, env: dict[str, int]) -> Any:
    return x.evaluate(env) if isinstance(x, Expr) else x


def _str(x: Any) -> str:
    if isinstance(x, Expr) and x.op not in ("sym", "neg"):
        return f"({x})"
    return str(x)


def _expr_of(x: Any) -> Any:
    e = getattr(x, "expr", None)
    return e if e is not None else x


def _operand(other: Any) -> Any:
    """The other operand of a symbolic number's operator as a Python or symbolic number, or
    None when the operator does not apply (NotImplemented). True is 1 (eager: 32 + True == 33)."""
    if isinstance(other, (int, float, SymbolicNumber)):
        return int(other) if isinstance(other, bool) else other
    if isinstance(other, (np.integer, np.bool_)):
        return int(other)
    if isinstance(other, np.floating):
        return float(other)
    return None


def _binop(op: str, reflected: bool = False) -> Callable:
    fn = _OPS[op]

    def method(self: Any, other: Any) -> Any:
        other = _operand(other)
        if other is None:
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
    if op in ("//", "*") and _is_int(b) and b == 1:
        return a
    if op in ("+", "-") and _is_int(b):  # constants added in a row fold: ``(T + 1) - 1`` is ``T``
        rest, const = _split_constant(a)
        return _with_constant(rest, const + b if op == "+" else const - b)
    if op == "+" and _is_int(a):
        return simplify("+", b, a)
    return Expr(op, a, b)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _split_constant(e: Any) -> tuple[Any, int]:
    """`e` as (an expression or None, an int) whose sum it is."""
    if _is_int(e):
        return None, e
    if isinstance(e, Expr) and e.op in ("+", "-") and _is_int(e.args[1]):
        return e.args[0], e.args[1] if e.op == "+" else -e.args[1]
    return e, 0


def _with_constant(rest: Any, const: int) -> Any:
    if rest is None:
        return const
    if const == 0:
        return rest
    return Expr("+", rest, const) if const > 0 else Expr("-", rest, -const)


def _compare(op: str) -> Callable:
    """A comparison that answers for the traced sizes and records that answer as a shape guard.

    Python code branching on a symbolic size (``if n == 1``, ``min(step, n - k)``) bakes the
    branch it took into the plan; the guard makes the plan retrace for sizes that would
    branch the other way (see `guards_hold`).
    """
    fn = _OPS[op]
    equality = op in ("==", "!=")

    def method(self: Any, other: Any) -> Any:
        other = _operand(other)
        if other is None:
            return NotImplemented
        a, b = _plain(self), _plain(other)
        result = fn(a, b)
        other_expr = _expr_of(other)
        # In kiln's own code, sizes that differ while tracing are taken to differ for every size
        # (as PyTorch's size-oblivious checks do): shape checks compare B with other dims all the
        # time, and a guard on each would retrace whenever B happened to equal one of them. Equal
        # sizes, every ordering, and every comparison in the user's code (``if n == 4: raise``)
        # are guarded.
        if str(self.expr) != str(other_expr) and (not (equality and a != b) or lowering_for_every_size()
                                                  or not converted_by_kiln(2)):
            _record_guard(Expr(op, self.expr, other_expr), result)
        return result

    return method


def _truth(self: Any) -> bool:
    result = _plain(self) != 0
    _record_guard(Expr("!=", self.expr, 0), result)
    return result


def lowering_for_every_size() -> bool:
    """Whether a native plan is being lowered from symbolic sizes for every size (cpu/size_guards.py): then
    every comparison is guarded, kiln's own of unequal sizes too, and every conversion raises."""
    return getattr(trace_state.tracer, "guards_every_comparison", False)


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
    """The concrete number behind a symbolic one (plain numbers pass through); never specializes."""
    if isinstance(x, SymbolicNumber):
        return x.value
    return x


def dim_text(d: Any) -> str:
    """A dim or param as graph text: the expression of a symbolic one (``B*2``), else str(d)."""
    expr = getattr(d, "expr", None)
    return str(expr) if isinstance(expr, Expr) else str(d)


# ---- specialization: a symbolic size turned into a plain Python value ------------------
def _stdlib_dirs() -> tuple[str, ...]:
    """The standard library's folders (string.Formatter, logging... convert for user code)."""
    paths = sysconfig.get_paths()
    return tuple(os.path.abspath(paths[k]) + os.sep for k in ("stdlib", "platstdlib") if paths.get(k))


_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIBRARY_DIRS = _stdlib_dirs()
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep
_FRAME_KIND: dict[str, str] = {}  # co_filename -> "kiln", "library" or "user"


def _frame_kind(filename: str) -> str:
    """"kiln", "library" (NumPy, the standard library) or "user" for a frame's co_filename."""
    kind = _FRAME_KIND.get(filename)
    if kind is None:
        path = os.path.abspath(filename)
        third_party = "site-packages" in path or "dist-packages" in path
        if path.startswith(_KILN_DIR):
            kind = "kiln"
        elif filename.startswith("<frozen") or (path.startswith(_LIBRARY_DIRS) and not third_party) \
                or (_NUMPY_DIR and path.startswith(_NUMPY_DIR)):
            kind = "library"
        else:
            kind = "user"
        _FRAME_KIND[filename] = kind
    return kind


def converted_by_kiln(depth: int = 2) -> bool:
    """Whether the code converting a size `depth` frames above our caller is kiln's own
    (library frames such as NumPy's and the standard library's are looked through)."""
    frame: Any = sys._getframe(depth)
    while frame is not None:
        kind = _frame_kind(frame.f_code.co_filename)
        if kind != "library":
            return kind == "kiln"
        frame = frame.f_back
    return False


def conversion_site(depth: int = 1) -> tuple[str, int, str] | None:
    """(file, line, via) of the user code behind a conversion `depth` frames above our caller,
    or None when the conversion happens inside a primitive's kernel.

    Kiln, NumPy and standard-library frames are looked through; `via` names the outermost
    kiln function on the way (" inside kiln's `tensor()`") when kiln did the converting. A
    kernel computes the values of this trace only (its params stay symbolic in the graph and
    are resolved per call), so what it converts is not baked into the plan.
    """
    frame: Any = sys._getframe(depth + 1)
    via = ""
    while frame is not None:
        kind = _frame_kind(frame.f_code.co_filename)
        if kind == "user":
            return frame.f_code.co_filename, frame.f_lineno, via
        if kind == "kiln":
            if frame.f_code.co_name == "kernel":
                return None
            via = f" inside kiln's `{frame.f_code.co_name}()`"
        frame = frame.f_back
    return "<unknown>", 0, via


def _specialize(values: tuple, how: str) -> None:
    """Report to the active tracer that symbolic `values` became plain Python values by `how`
    (a template naming each value as {0}, {1}). Called directly by the conversion dunders."""
    hook = getattr(trace_state.tracer, "specialize", None)
    if hook is None:
        return
    # (while a native plan is lowered, every conversion counts: the hook raises, see cpu/size_guards.py)
    site = conversion_site(2) if not lowering_for_every_size() else ("<lowering>", 0, "")
    if site is None:
        return
    why = how.format(*[dim_text(v) for v in values])
    for x in values:
        if isinstance(x, (SymInt, SymFloat)):
            hook(x, why, site)


def _converter(how: str, convert: Callable[..., Any]) -> Callable:
    """A conversion dunder: specializes (see `Tracer.specialize`), then converts the plain value."""
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        _specialize((self,), how)
        return convert(_plain(self), *args, **kwargs)

    return method


def _text(how: str, convert: Callable[..., str]) -> Callable:
    """str/repr/format: while tracing, user code gets eager's text of the number ("32") and the
    plan is specialized; kiln's own messages and graph dumps, and any code outside a trace
    (inspecting a graph's shapes), get the expression ("B") and change nothing."""
    def method(self: Any, *args: Any) -> str:
        if lowering_for_every_size():  # (lowering: a size written as text would be the traced one)
            _specialize((self,), how)
        if getattr(trace_state.tracer, "specialize", None) is None or converted_by_kiln():
            return str(self.expr) if not args or not args[0] else convert(_plain(self), *args)
        _specialize((self,), how)
        return convert(_plain(self), *args)

    return method


def _specializing_op(symbol: str, reflected: bool = False) -> Callable:
    """An int/float operator with no symbolic form: the plain result, with every symbolic
    operand specialized (so the result is exact for the sizes the plan is guarded to)."""
    fn = {"**": pow, "<<": operator.lshift, ">>": operator.rshift, "&": operator.and_, "|": operator.or_,
          "^": operator.xor}[symbol]

    def method(self: Any, other: Any, *mod: Any) -> Any:
        other = _operand(other)
        if other is None:
            return NotImplemented
        a, b = (other, self) if reflected else (self, other)
        _specialize((a, b), f"`{{0}} {symbol} {{1}}`")
        return fn(_plain(a), _plain(b), *mod)

    return method


def _unary(name: str, fn: Callable[[Any], Any]) -> Callable:
    def method(self: Any) -> Any:
        _specialize((self,), f"`{name}({{0}})`")
        return fn(_plain(self))

    return method


def _divmod(reflected: bool = False) -> Callable:
    """divmod stays symbolic: (a // b, a % b)."""
    def method(self: Any, other: Any) -> Any:
        other = _operand(other)
        if other is None:
            return NotImplemented
        a, b = (other, self) if reflected else (self, other)
        return a // b, a % b

    return method


def _as_array(value: Any, dtype: Any = None, copy: Any = None) -> np.ndarray:
    return np.asarray(value, dtype=dtype)


class _SymbolicNumber(SymbolicNumber):
    """Operators shared by SymInt and SymFloat: arithmetic builds expressions, comparisons
    answer with the concrete values (recording shape guards while tracing), and conversions
    to plain Python values specialize the plan (see the module docstring)."""

    __slots__ = ("value", "expr")
    value: Any
    expr: Expr

    __repr__ = _text("`repr({0})` (printing or formatting a shape tuple calls it)", repr)
    __str__ = _text("`str({0})` (print, '%s')", str)
    __format__ = _text("formatting `{0}` (an f-string or format())", format)
    __add__ = _binop("+")
    __radd__ = _binop("+", True)
    __sub__ = _binop("-")
    __rsub__ = _binop("-", True)
    __mul__ = _binop("*")
    __rmul__ = _binop("*", True)
    __truediv__ = _binop("/")
    __rtruediv__ = _binop("/", True)
    __floordiv__ = _binop("//")
    __rfloordiv__ = _binop("//", True)
    __mod__ = _binop("%")
    __rmod__ = _binop("%", True)
    __divmod__ = _divmod()
    __rdivmod__ = _divmod(True)
    __pow__ = _specializing_op("**")
    __rpow__ = _specializing_op("**", True)
    __eq__ = _compare("==")
    __ne__ = _compare("!=")
    __lt__ = _compare("<")
    __le__ = _compare("<=")
    __gt__ = _compare(">")
    __ge__ = _compare(">=")
    __bool__ = _truth
    __abs__ = _unary("abs", abs)
    __int__ = _converter("`int({0})` ('%d', np.int64 and kiln.tensor call it too)", int)
    __float__ = _converter("`float({0})` (math.sqrt, math.log and other float math call it too)", float)
    __round__ = _converter("`round({0})`", round)
    __trunc__ = _converter("`math.trunc({0})`", math.trunc)
    __floor__ = _converter("`math.floor({0})`", math.floor)
    __ceil__ = _converter("`math.ceil({0})`", math.ceil)
    __array__ = _converter("NumPy reading `{0}` (np.asarray, np.prod, np.array of a shape)", _as_array)

    def __pos__(self) -> Any:
        return self

    def __hash__(self) -> int:
        return hash(self.value)

    def __getattr__(self, name: str) -> Any:
        """The plain number's public attributes and methods (``B.bit_length()``, ``n.real``),
        read from the traced value: that specializes."""
        if name.startswith("_") or not hasattr(self.value, name):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        _specialize((self,), f"`{{0}}.{name}`")
        return getattr(self.value, name)

    def __reduce__(self) -> tuple:
        return (type(self), (self.value, self.expr))


class SymInt(_SymbolicNumber):
    """A size that carries an expression over symbolic dims; it acts as the int traced."""

    __slots__ = ()
    integral = True

    def __init__(self, value: int, expr: Expr):
        self.value = int(value)
        self.expr = expr

    __index__ = _converter("using `{0}` as an index or count (range, np.zeros, seq[:n], [0] * n call "
                           "__index__)", int)
    __lshift__ = _specializing_op("<<")
    __rlshift__ = _specializing_op("<<", True)
    __rshift__ = _specializing_op(">>")
    __rrshift__ = _specializing_op(">>", True)
    __and__ = _specializing_op("&")
    __rand__ = _specializing_op("&", True)
    __or__ = _specializing_op("|")
    __ror__ = _specializing_op("|", True)
    __xor__ = _specializing_op("^")
    __rxor__ = _specializing_op("^", True)
    __invert__ = _unary("~", operator.invert)

    def __neg__(self) -> "SymInt":
        return SymInt(-self.value, Expr("neg", self.expr))


class SymFloat(_SymbolicNumber):
    """A float computed from symbolic dims (e.g. 1 / B)."""

    __slots__ = ()

    def __init__(self, value: float, expr: Expr):
        self.value = float(value)
        self.expr = expr

    def __neg__(self) -> "SymFloat":
        return SymFloat(-self.value, Expr("neg", self.expr))


numbers.Integral.register(SymInt)
numbers.Real.register(SymFloat)


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


def resolve_leaf(x: Any, env: Mapping[str, int] | None) -> Any:
    """One output leaf for this call: a SymInt/SymFloat becomes the plain int/float it stands
    for at this call's sizes `env` (its traced value when env is None); others are unchanged."""
    if isinstance(x, SymInt):
        return int(x.expr.evaluate(env)) if env is not None else _plain(x)
    if isinstance(x, SymFloat):
        return float(x.expr.evaluate(env)) if env is not None else _plain(x)
    return x


def resolve_output_statics(statics: Mapping[int, Any], env: Mapping[str, int] | None) -> dict[int, Any]:
    """The non-tensor output leaves of a plan (leaf position -> value) for one call.

    A function returning a size (``return y, x.shape[0]``) returns that call's size, as eager
    does: each symbolic leaf is evaluated for `env` (the call's dynamic_dims sizes by name),
    and comes back as a plain int/float (eager returns an int, never a SymInt). With env None
    (the traced call itself, or no dynamic dims) a symbolic leaf gives its traced value.
    """
    return {pos: resolve_leaf(value, env) for pos, value in statics.items()}
