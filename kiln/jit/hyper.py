"""Hyperparameters read fresh on every call: `HyperScalar`, its expressions, sources and guards.

While kiln.compile traces a function, an optimizer's parameter groups answer a numeric
read (``group["lr"]``, ``group["betas"][0]``) with a `HyperScalar` (see
kiln.optim.param_group). It acts as the number seen while tracing and remembers where it
came from, so nothing is baked into the plan:

- arithmetic with Python numbers builds an expression (``-lr``, ``1 - beta1``,
  ``lr * weight_decay``), evaluated in Python floats for each call's values;
- as an operand of a tensor op (``p * lr``) it becomes a 0-d input of the plan, in the
  tensor's dtype, filled on every call from the current ``param_groups``;
- a comparison or truth test (``if momentum != 0``) answers for the traced value and
  records a guard: a later change that answers differently retraces, other changes do not;
- turning it into a plain Python value (``float(lr)``, an f-string) guards its exact value.

So an ``lr_scheduler.step()`` outside the compiled function, or a hand edit of
``param_groups``, takes effect on the next call without retracing.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable

import numpy as np

from ..trace_state import trace_state
from ..sizes import SymbolicNumber

# An expression is a tuple: ("src", i) reads source i, ("num", v) is a constant, (op, a, b)
# applies a binary operator, ("neg", a) / ("abs", a) a unary one.
_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
    "%": operator.mod, "**": operator.pow,
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge, "is": operator.is_,
}
_UNARY: dict[str, Callable[[Any], Any]] = {"neg": operator.neg, "abs": abs, "pos": operator.pos, "sqrt": math.sqrt}


def evaluate(expr: tuple, env: list) -> Any:
    """The value of `expr` for the source values `env` (Python numbers, as eager code computes)."""
    kind = expr[0]
    if kind == "src":
        return env[expr[1]]
    if kind == "num":
        return expr[1]
    if kind in _UNARY:
        return _UNARY[kind](evaluate(expr[1], env))
    return _BINARY[kind](evaluate(expr[1], env), evaluate(expr[2], env))


_PY_UNARY = {"neg": "-({0})", "pos": "+({0})", "abs": "abs({0})", "sqrt": "_sqrt({0})"}


def _source_code(expr: tuple) -> str | None:
    """Python source computing `expr` from a list `e` of source values (None if it holds a non-number)."""
    kind = expr[0]
    if kind == "src":
        return f"e[{int(expr[1])}]"
    if kind == "num":
        value = expr[1]
        return repr(value) if type(value) in (int, float, bool) and value == value and abs(value) != math.inf else None
    parts = [_source_code(a) for a in expr[1:]]
    if any(p is None for p in parts):
        return None
    if kind in _PY_UNARY:
        return _PY_UNARY[kind].format(parts[0])
    if kind not in ("+", "-", "*", "/", "//", "%", "**"):
        return None
    return f"({parts[0]} {kind} {parts[1]})"


def compile_expr(expr: tuple) -> Callable[[list], Any]:
    """`evaluate` for one expression as a Python function (several times faster per call); the same
    Python float operations, so the same results."""
    code = _source_code(expr)
    if code is None:
        return lambda env: evaluate(expr, env)
    return _function_of_sources(code)


def _function_of_sources(code: str) -> Callable[[list], Any]:
    """``lambda e: <code>`` for source code `_source_code` wrote (only our own names in scope)."""
    return eval(f"lambda e: {code}", {"_sqrt": math.sqrt, "__builtins__": {"abs": abs}})  # noqa: S307 - our own


_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


def compile_guards(guards: tuple) -> Callable[[list], bool] | None:
    """One Python function saying whether every ``(expr, result)`` guard still gives its result for
    the source values `env` (the comparisons `evaluate` makes, in the same order), or None when a
    guard holds something Python source cannot spell (a string, None): then only `evaluate` can tell."""
    parts = []
    for expr, result in guards:
        if expr[0] not in _COMPARISONS or type(result) is not bool:
            return None
        a, b = _source_code(expr[1]), _source_code(expr[2])
        if a is None or b is None:
            return None
        parts.append(f"(({a} {expr[0]} {b}) == {result!r})")
    return _function_of_sources(" and ".join(parts) or "True")


def expr_text(expr: tuple, names: list[str]) -> str:
    """`expr` as text, naming each source as `names` does (``-param_groups[0]['lr']``)."""
    kind = expr[0]
    if kind == "src":
        return names[expr[1]] if expr[1] < len(names) else f"source {expr[1]}"
    if kind == "num":
        return repr(expr[1])
    if kind in _UNARY:
        inner = expr_text(expr[1], names)
        return f"-{inner}" if kind == "neg" else f"{kind}({inner})"
    return f"({expr_text(expr[1], names)} {kind} {expr_text(expr[2], names)})"


class HyperSource:
    """Where a hyperparameter is read on each call: ``optimizer.param_groups[group][key]`` (and
    ``[item]`` for an entry of a tuple such as ``betas``)."""

    kind = "group"

    __slots__ = ("optimizer", "group", "key", "item")

    def __init__(self, optimizer: Any, group: int, key: str, item: int | None = None):
        self.optimizer = optimizer
        self.group = group
        self.key = key
        self.item = item

    def read(self) -> Any:
        value = dict.__getitem__(self.optimizer.param_groups[self.group], self.key)
        return value if self.item is None else value[self.item]

    def name(self) -> str:
        text = f"{type(self.optimizer).__name__}.param_groups[{self.group}][{self.key!r}]"
        return text if self.item is None else f"{text}[{self.item}]"


class StateSource:
    """A 0-d optimizer state tensor read as a host number at the start of each call
    (``optimizer.state[param]["step"]``): bias corrections computed from it in Python floats
    round exactly as the eager step's."""

    __slots__ = ("optimizer", "param", "key")
    kind = "state"

    def __init__(self, optimizer: Any, param: Any, key: str):
        self.optimizer = optimizer
        self.param = param
        self.key = key

    def read(self) -> float:
        return float(self.optimizer.state[self.param][self.key]._data)

    def name(self) -> str:
        return f"{type(self.optimizer).__name__}.state[<param>][{self.key!r}]"


def sqrt(x: Any) -> Any:
    """``math.sqrt`` that keeps a `HyperScalar` symbolic (evaluated with math.sqrt on every call)."""
    if isinstance(x, HyperScalar):
        return HyperScalar(math.sqrt(x.value), ("sqrt", x.expr))
    return math.sqrt(x)


class HyperInput:
    """The spec of a plan input filled with a hyperparameter expression (a 0-d tensor, or `shape`)."""

    __slots__ = ("expr", "dtype", "shape", "text", "_compute")

    def __init__(self, expr: tuple, dtype: np.dtype, shape: tuple, text: str):
        self.expr = expr
        self.dtype = dtype
        self.shape = shape
        self.text = text
        self._compute = compile_expr(expr)

    def array(self, env: list) -> np.ndarray:
        value = self._compute(env)
        if self.shape:
            return np.full(self.shape, value, dtype=self.dtype)
        return np.array(value, dtype=self.dtype)

    def __repr__(self) -> str:
        return f"hyper({self.text})"


def _other(x: Any) -> tuple | None:
    """The expression of an operand (a HyperScalar or a Python number), or None for anything else."""
    if isinstance(x, HyperScalar):
        return x.expr
    if isinstance(x, (bool, int, float, np.integer, np.floating, np.bool_)):
        return ("num", x.item() if isinstance(x, np.generic) else x)
    return None


def _value(x: Any) -> Any:
    return x.value if isinstance(x, HyperScalar) else (x.item() if isinstance(x, np.generic) else x)


def _binary(op: str, reflected: bool = False) -> Callable:
    fn = _BINARY[op]

    def method(self: "HyperScalar", other: Any) -> Any:
        other_expr = _other(other)
        if other_expr is None:
            if isinstance(other, SymbolicNumber):  # a symbolic size (dynamic_dims): pin this value
                return fn(other, self._plain(f"`{op}` with a symbolic size")) if reflected else \
                    fn(self._plain(f"`{op}` with a symbolic size"), other)
            return NotImplemented
        a, b = (other, self) if reflected else (self, other)
        value = fn(_value(a), _value(b))
        ea, eb = (other_expr, self.expr) if reflected else (self.expr, other_expr)
        return HyperScalar(value, (op, ea, eb))

    return method


def _compare(op: str) -> Callable:
    fn = _BINARY[op]

    def method(self: "HyperScalar", other: Any) -> Any:
        other_expr = _other(other)
        if other_expr is None:
            return NotImplemented
        result = bool(fn(self.value, _value(other)))
        _guard((op, self.expr, other_expr), result)
        return result

    return method


def _unary(op: str) -> Callable:
    fn = _UNARY[op]

    def method(self: "HyperScalar") -> "HyperScalar":
        return HyperScalar(fn(self.value), (op, self.expr))

    return method


def _guard(expr: tuple, result: Any) -> None:
    """Record that `expr` evaluated to `result` while tracing (the plan is valid while it still does)."""
    capture = getattr(trace_state.tracer, "step_capture", None)
    if capture is not None:
        capture().add_hyper_guard(expr, result)


def _in_kernel() -> bool:
    """Whether a primitive's kernel (not user code) is converting: kernels compute this trace's values
    only, and the tracer turns a hyperparameter operand into a plan input, so nothing is baked."""
    from .symbolic import conversion_site  # noqa: PLC0415

    return conversion_site(2) is None


class HyperScalar(SymbolicNumber):
    """A hyperparameter read while tracing: the traced number, plus how to recompute it per call.

    >>> lr = group["lr"]          # inside a compiled step: a HyperScalar
    >>> p.add_(p.grad * -lr)      # -lr becomes a plan input filled on every call
    """

    __slots__ = ("value", "expr")
    integral = False

    def __init__(self, value: Any, expr: tuple):
        self.value = value
        self.expr = expr

    def _plain(self, why: str) -> Any:
        """The traced value as a plain Python value: the plan is guarded on it exactly."""
        _guard(("==", self.expr, ("num", self.value)), True)
        return self.value

    __add__ = _binary("+")
    __radd__ = _binary("+", True)
    __sub__ = _binary("-")
    __rsub__ = _binary("-", True)
    __mul__ = _binary("*")
    __rmul__ = _binary("*", True)
    __truediv__ = _binary("/")
    __rtruediv__ = _binary("/", True)
    __floordiv__ = _binary("//")
    __rfloordiv__ = _binary("//", True)
    __mod__ = _binary("%")
    __rmod__ = _binary("%", True)
    __pow__ = _binary("**")
    __rpow__ = _binary("**", True)
    __neg__ = _unary("neg")
    __pos__ = _unary("pos")
    __abs__ = _unary("abs")
    __eq__ = _compare("==")
    __ne__ = _compare("!=")
    __lt__ = _compare("<")
    __le__ = _compare("<=")
    __gt__ = _compare(">")
    __ge__ = _compare(">=")

    def __bool__(self) -> bool:
        result = bool(self.value)
        _guard(("!=", self.expr, ("num", 0)), result)
        return result

    def __float__(self) -> float:
        return float(self.value if _in_kernel() else self._plain("float()"))

    def __int__(self) -> int:
        return int(self._plain("int()"))

    def __index__(self) -> int:
        if not isinstance(self.value, int):
            raise TypeError(f"a hyperparameter of type {type(self.value).__name__} cannot be used as an index")
        return int(self._plain("index"))

    def __round__(self, ndigits: int | None = None) -> Any:
        return round(self._plain("round()"), ndigits)

    def __trunc__(self) -> int:
        return math.trunc(self._plain("math.trunc()"))

    def __floor__(self) -> int:
        return math.floor(self._plain("math.floor()"))

    def __ceil__(self) -> int:
        return math.ceil(self._plain("math.ceil()"))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = self.value if _in_kernel() else self._plain("NumPy")
        return np.asarray(value, dtype=dtype)

    def __str__(self) -> str:
        return str(self._plain("str()"))

    def __format__(self, spec: str) -> str:
        return format(self._plain("format()"), spec)

    def __repr__(self) -> str:
        return f"HyperScalar({self.value!r})"

    def __hash__(self) -> int:
        return hash(self.value)

    def __reduce__(self) -> tuple:
        return (type(self), (self.value, self.expr))
