"""The miss log behind ``explain()``: why each call missed the cache, as data and as text.

Each reason is a `MissReason`: a string (what ``explain()`` prints) that also
carries its parts, ``kind``, ``field``, ``old`` and ``new``, so code reads them
instead of parsing text. The log also spots a value that keeps changing (a dim,
or a guarded Python value) and warns once that each change recompiles.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

from .cache import KEY_FIELDS, CacheKey, CompilationStats
from .user_frames import user_stacklevel

LOG_LIMIT = 100  # explain() history lines and stats.miss_reasons kept (older ones are dropped)


class MissReason(str):
    """One reason for a miss: its text, plus ``kind`` ("first call", "shape", "dtype", "device",
    "requires_grad", "guard", "module attribute", "module", "grad_enabled", "structure",
    "statics", "backend", ...), ``field`` (what changed, e.g. ``cfg.scale`` or ``tensor leaf 0``)
    and the ``old`` and ``new`` values (None where they do not apply)."""

    kind: str
    field: Any
    old: Any
    new: Any

    def __new__(cls, text: str, kind: str, field: Any = None, old: Any = None, new: Any = None) -> "MissReason":
        reason = super().__new__(cls, text)
        reason.kind, reason.field, reason.old, reason.new = kind, field, old, new
        return reason


class MissLog:
    """explain()'s history of one compiled function, and its repeated-change warnings."""

    def __init__(self, name: str, stats: CompilationStats, warn_once: Callable[[str, str, int], None]):
        self.name = name
        self.stats = stats
        self.lines: list[str] = []  # the newest LOG_LIMIT to 2 * LOG_LIMIT lines
        self.dropped = 0
        self.last_key: CacheKey | None = None
        self._changes: dict[Any, int] = {}  # a dim or a guarded value -> how many misses it caused
        self._warn_once = warn_once

    def note_miss(self, key: CacheKey, cached: list[CacheKey], max_entries: int,
                  describe_guards: Callable[[tuple, tuple], list], arg_of_leaf: Callable[[int], int],
                  stale: MissReason | None = None) -> None:
        """Record why `key` missed: compared with the closest cached key (or the last one); `stale` is
        the reason an entry cached under this very key could not serve the call."""
        reference = min(cached, key=lambda k: len(describe_difference(key, k))) if cached else self.last_key
        if stale is not None:
            reasons: list = [stale]
        elif reference is None:
            reasons = [MissReason("first call", "first call")]
        else:
            reasons = describe_difference(key, reference)
            for leaf, dim in changed_dims(key, reference):
                count = self._count(("dim", leaf, dim))
                if count >= max_entries:
                    arg = arg_of_leaf(leaf)
                    self._warn_once(f"dim{leaf}.{dim}", (
                        f"kiln.compile({self.name}) has recompiled {count + 1} times because dimension "
                        f"{dim} of argument {arg} keeps changing. Mark it dynamic to share one plan: "
                        f"dynamic_dims={{{arg}: {{{dim}: 'n'}}}}, or leave kiln.compile's dynamic=None (the "
                        "default), which makes a dim that changes size dynamic by itself"), 6)
            guarded = describe_guards(key.statics, reference.statics)
            if guarded:  # name the Python values that changed instead of printing the raw key
                reasons = [r for r in reasons if r.kind != "statics"] + guarded
                self._note_guard_changes(guarded, max_entries)
        self.stats.miss_reasons.append(reasons)
        self.lines.append(f"miss #{self.stats.misses + 1}: " + "; ".join(reasons))

    def _count(self, what: Any) -> int:
        count = self._changes.get(what, 0) + 1
        self._changes[what] = count
        return count

    def _note_guard_changes(self, reasons: list, max_entries: int) -> None:
        """Warn when one Python value keeps changing: each change recompiles, so it belongs in a tensor."""
        for reason in reasons:
            if reason.kind != "guard":
                continue
            count = self._count(("guard", reason.field))
            if count >= max_entries:
                self._warn_once(f"guard {reason.field}", (
                    f"kiln.compile({self.name}) has recompiled {count + 1} times because `{reason.field}` keeps "
                    "changing: every plan bakes in the value it saw. Pass it as a tensor argument (or read it "
                    "from a tensor) to share one plan."), 7)

    def mark(self) -> tuple[int, int]:
        """A point to roll back to if the compile that follows fails."""
        return len(self.stats.miss_reasons), len(self.lines)

    def roll_back(self, mark: tuple[int, int]) -> None:
        del self.stats.miss_reasons[mark[0]:]
        del self.lines[mark[1]:]

    def trim(self) -> None:
        """Keep the newest LOG_LIMIT lines and miss reasons, so a long run's memory stays flat."""
        if len(self.lines) > 2 * LOG_LIMIT:
            dropped = len(self.lines) - LOG_LIMIT
            del self.lines[:dropped]
            self.dropped += dropped
        if len(self.stats.miss_reasons) > 2 * LOG_LIMIT:
            del self.stats.miss_reasons[:len(self.stats.miss_reasons) - LOG_LIMIT]

    def text(self) -> str:
        """explain(): the stats, then every miss with its reasons and the passes each compile ran."""
        lines = [f"{self.name}: {self.stats!r}"]
        if self.dropped:
            lines.append(f"({self.dropped} older lines dropped)")
        lines.extend(self.lines)
        return "\n".join(lines)


def warn_once(warned: set[str], tag: str, message: str, stacklevel: int = 0) -> None:
    """Warn once per tag: a RuntimeWarning pointing at the innermost frame outside kiln
    (the user's call of the compiled function). `stacklevel` is ignored: kept for callers' clarity."""
    if tag not in warned:
        warned.add(tag)
        warnings.warn(message, RuntimeWarning, stacklevel=user_stacklevel())


_MODULE_PARTS = (("module", "module structure (params, buffers, submodules or hooks)"), ("training", "training mode"),
                 ("module attribute", "module attributes"), ("requires_grad", "parameter requires_grad"))


def describe_difference(new: CacheKey, old: CacheKey) -> list[MissReason]:
    """Why `new` missed an entry keyed `old`, one reason per differing part."""
    reasons = []
    for name in KEY_FIELDS:
        a, b = getattr(new, name), getattr(old, name)
        if a == b:
            continue
        if name == "tensors" and len(a) == len(b):
            for (i, *new_parts), (_, *old_parts) in zip(a, b):
                for kind, x, y in zip(("shape", "dtype", "device", "requires_grad"), new_parts, old_parts):
                    if x != y:
                        shown = (_shape(y), _shape(x)) if kind == "shape" else (y, x)
                        reasons.append(MissReason(f"tensor leaf {i}: {kind} {shown[0]} -> {shown[1]}", kind,
                                                  f"tensor leaf {i}", y, x))
        elif name == "module" and a and b:
            for (kind, label), x, y in zip(_MODULE_PARTS, a, b):
                if x == y:
                    continue
                if kind == "module attribute":
                    old_attrs, new_attrs = dict(y), dict(x)
                    for attr in sorted(set(old_attrs) | set(new_attrs)):
                        before, after = old_attrs.get(attr), new_attrs.get(attr)
                        if before != after:
                            reasons.append(MissReason(f"module attribute `{attr}` changed: {_value(before)} -> "
                                                      f"{_value(after)}", kind, attr, _value(before), _value(after)))
                else:
                    reasons.append(MissReason(f"{label} changed", kind, label, y, x))
        else:
            reasons.append(MissReason(f"{name}: {_short(b)} -> {_short(a)}", name, name, b, a))
    return reasons or [MissReason("no cached entry", "no cached entry")]


def changed_dims(new: CacheKey, old: CacheKey) -> list[tuple[int, int]]:
    """(tensor leaf, dim) pairs whose size differs, when only shapes differ."""
    if any(getattr(new, f) != getattr(old, f) for f in KEY_FIELDS if f != "tensors"):
        return []
    if len(new.tensors) != len(old.tensors):
        return []
    out = []
    for (i, sa, da, dva, ra), (_, sb, db, dvb, rb) in zip(new.tensors, old.tensors):
        if (da, dva, ra) != (db, dvb, rb) or len(sa) != len(sb):
            return []
        out.extend((i, d) for d, (x, y) in enumerate(zip(sa, sb)) if x != y)
    return out


def _value(key: Any) -> str:
    """A static key ("float", "2.0") shown as the value it stands for."""
    if isinstance(key, tuple) and len(key) == 2:
        return str(key[1])
    return "<unset>" if key is None else repr(key)


def _shape(s: tuple) -> str:
    return "(" + ", ".join(str(d) for d in s) + ("," if len(s) == 1 else "") + ")"


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) < 80 else text[:77] + "..."
