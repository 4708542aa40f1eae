"""Reading a function's bytecode for the Python values it reads and the side effects it has.

A read is a chain ``root.attr[const].attr...`` whose root is a global, a closure
variable or a local (a parameter, ``self``). Some calls turn into chain steps:
``getattr(obj, "name")`` is ``obj.name``; ``getattr(obj, name)`` with a computed
name, and ``vars(obj)``, read ``obj.__dict__`` as a whole; ``d.get("k")`` and
``os.getenv("K")`` are item reads. A side effect is an attribute or item store
through a chain, a write to a global or nonlocal, or a call of a mutating method
(``log.append(x)``) on a chain: it runs while tracing and never on a replay.
The scan is cached per code object (bytecode never changes).
"""
from __future__ import annotations

import dis
import functools
import types
from typing import Any, NamedTuple

_LOAD_FAST = ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW")
_LOAD_CONST = ("LOAD_CONST", "LOAD_SMALL_INT")
_CALLS = ("PRECALL", "CALL", "CALL_FUNCTION", "CALL_METHOD", "CALL_KW", "CALL_FUNCTION_KW")
_STORES = ("STORE_ATTR", "DELETE_ATTR")
_ITEM_STORES = ("STORE_SUBSCR", "DELETE_SUBSCR")
MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "add",
                      "discard", "popitem", "sort", "reverse", "write", "writelines", "__setitem__",
                      "__delitem__", "appendleft", "extendleft", "popleft"})
_WHOLE_OBJECT = {"getattr": "getattr", "hasattr": "getattr", "vars": "vars"}
_MISSING = object()


class Read(NamedTuple):
    """A chain read at `line`: load kind ("global", "deref", "fast"), root name and steps."""

    kind: str
    name: str
    steps: tuple
    line: int


class Effect(NamedTuple):
    """A side effect at `line` through the object a chain reads; `what` says how it is spelled."""

    kind: str
    name: str
    steps: tuple
    line: int
    what: str


def _line(ins: dis.Instruction, previous: int) -> int:
    positions = getattr(ins, "positions", None)
    if positions is not None and positions.lineno is not None:
        return positions.lineno
    line = getattr(ins, "line_number", None) or getattr(ins, "starts_line", None)
    return line if isinstance(line, int) and not isinstance(line, bool) else previous


def _spelled(read: Read) -> str:
    text = read.name
    for step, key in read.steps:
        text += f".{key}" if step == "attr" else f"[{key!r}]"
    return text


class _Scanner:
    """One left-to-right pass over a code object's instructions."""

    def __init__(self, code: types.CodeType):
        self.code = code
        self.reads: list[Read] = []
        self.effects: list[Effect] = []
        self.current: tuple[str, str] | None = None
        self.steps: list = []
        self.const: Any = _MISSING
        self.marker: str | None = None  # the call the current chain is the first argument of
        self.next_marker: str | None = None
        self.line = code.co_firstlineno
        self.recent: list[Read] = []  # the last chains, for the target of a store
        self.finished_on_const = False

    def run(self) -> None:
        for ins in dis.get_instructions(self.code):
            self.line = _line(ins, self.line)
            if self.current is not None and self._continues(ins):
                continue
            if self.current is not None:
                self._finish(ins)
            self._effect_of(ins)
            self._start(ins)
        if self.current is not None:
            self._finish(None)

    def _continues(self, ins: dis.Instruction) -> bool:
        op = ins.opname
        if op in ("LOAD_ATTR", "LOAD_METHOD") and self.const is _MISSING:
            self.steps.append(("attr", ins.argval))
            return True
        if op in _LOAD_CONST and self.const is _MISSING:
            self.const = ins.argval
            return True
        if self.const is not _MISSING and (op == "BINARY_SUBSCR" or (op == "BINARY_OP" and ins.argrepr == "[]")):
            try:
                hash(self.const)
            except TypeError:
                return False
            self.steps.append(("item", self.const))
            self.const = _MISSING
            return True
        return False

    def _finish(self, ins: dis.Instruction | None) -> None:
        """End the current chain; calls it is part of become steps or side effects."""
        op = ins.opname if ins is not None else ""
        steps, const, marker = self.steps, self.const, self.marker
        calling = op in _CALLS or (op in _LOAD_CONST and const is not _MISSING)
        if marker == "getattr":
            steps.append(("attr", const) if isinstance(const, str) and calling else ("attr", "__dict__"))
        elif marker == "vars" and calling:
            steps.append(("attr", "__dict__"))
        elif steps and steps[-1] == ("attr", "get") and const is not _MISSING and calling:
            steps[-1] = ("item", const)
        elif steps and steps[-1] == ("attr", "getenv") and isinstance(const, str) and calling:
            steps[-1:] = [("attr", "environ"), ("item", const)]
        elif len(steps) > 0 and steps[-1][0] == "attr" and steps[-1][1] in MUTATORS and op in (
                *_CALLS, *_LOAD_FAST, *_LOAD_CONST, "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_NAME"):
            target = Read(self.current[0], self.current[1], tuple(steps[:-1]), self.line)  # type: ignore[index]
            self.effects.append(Effect(*target, f"{_spelled(target)}.{steps[-1][1]}(...)"))
        read = Read(self.current[0], self.current[1], tuple(steps), self.line)  # type: ignore[index]
        self.reads.append(read)
        self.recent = (self.recent + [read])[-2:]
        self.finished_on_const = const is not _MISSING  # `x[0] = v`: the chain itself is the target
        self.current, self.steps, self.const, self.marker = None, [], _MISSING, None

    def _effect_of(self, ins: dis.Instruction) -> None:
        op = ins.opname
        if op in _STORES and self.recent:
            target = self.recent[-1]
            verb = "del " if op.startswith("DELETE") else ""
            self.effects.append(Effect(*target[:3], self.line, f"{verb}{_spelled(target)}.{ins.argval} = ..."))
        elif op in _ITEM_STORES and self.recent and (self.finished_on_const or len(self.recent) >= 2):
            target = self.recent[-1] if self.finished_on_const else self.recent[-2]
            self.effects.append(Effect(*target[:3], self.line, f"{_spelled(target)}[...] = ..."))
        elif op in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            self.effects.append(Effect("global", ins.argval, (), self.line, f"global {ins.argval} = ..."))
        elif op in ("STORE_DEREF", "DELETE_DEREF") and ins.argval in self.code.co_freevars:
            self.effects.append(Effect("deref", ins.argval, (), self.line, f"nonlocal {ins.argval} = ..."))

    def _start(self, ins: dis.Instruction) -> None:
        op = ins.opname
        kind = None
        if op in ("LOAD_GLOBAL", "LOAD_NAME"):
            kind, name = "global", ins.argval
        elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
            if ins.argval in self.code.co_freevars:
                kind, name = "deref", ins.argval
        elif op in _LOAD_FAST:
            kind, name = "fast", ins.argval
        elif op.startswith("LOAD_FAST") and isinstance(ins.argval, tuple) and ins.argval:
            kind, name = "fast", ins.argval[-1]  # 3.13's LOAD_FAST_LOAD_FAST: the last name is on top
        if kind is None:
            self.next_marker = None
            return
        self.current = (kind, name)
        self.marker, self.next_marker = self.next_marker, None
        if kind == "global" and name in _WHOLE_OBJECT:
            self.next_marker = _WHOLE_OBJECT[name]


@functools.lru_cache(maxsize=2048)
def scan(code: types.CodeType) -> tuple[tuple[Read, ...], tuple[Effect, ...]]:
    """The reads and side effects of `code`; nested code (lambdas, comprehensions, inner
    functions) contributes its globals and the closure variables it shares with `code`."""
    scanner = _Scanner(code)
    scanner.run()
    reads, effects = scanner.reads, scanner.effects
    for const_value in code.co_consts:
        if isinstance(const_value, types.CodeType):
            inner_reads, inner_effects = scan(const_value)
            shared = [r for r in inner_reads if r.kind == "global" or (r.kind == "deref" and r.name in code.co_freevars)]
            reads.extend(shared)
            effects.extend(e for e in inner_effects
                           if e.kind == "global" or (e.kind == "deref" and e.name in code.co_freevars))
    return tuple(reads), tuple(effects)
