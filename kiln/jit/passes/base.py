"""The pass protocol: any object with `name` and `__call__(graph) -> graph`.

A list of passes is itself a pass (`Pipeline`). `Looped(p)` repeats `p` until the
graph stops changing; `Timed(p)` records how long it took. Every pass run through
`run_pass` is logged with node counts before and after, which `explain()` shows.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, runtime_checkable

from ..ir import Graph


@runtime_checkable
class Pass(Protocol):
    """A graph-to-graph transformation."""

    name: str

    def __call__(self, graph: Graph) -> Graph: ...


@dataclass
class PassRecord:
    name: str
    nodes_before: int
    nodes_after: int
    ms: float
    detail: str = ""  # e.g. which rewrite rules fired


@dataclass
class PassLog:
    """What each pass did to the node count, in order."""

    records: list[PassRecord] = field(default_factory=list)

    def add(self, name: str, before: int, after: int, ms: float, detail: str = "") -> None:
        self.records.append(PassRecord(name, before, after, ms, detail))

    def __str__(self) -> str:
        lines = [f"  {r.name:<28} {r.nodes_before:>5} -> {r.nodes_after:<5} nodes  {r.ms:7.2f} ms"
                 + (f"  [{r.detail}]" if r.detail else "") for r in self.records]
        return "\n".join(lines)


class _ActiveLogs(threading.local):
    """The logs being collected on this thread (threads compile concurrently)."""

    def __init__(self) -> None:
        self.stack: list[PassLog] = []


_active = _ActiveLogs()


def run_pass(p: Any, graph: Graph) -> Graph:
    """Apply one pass (or a list of passes), logging it when a log is active."""
    if isinstance(p, (list, tuple)):
        p = Pipeline(p)
    if not callable(p):
        raise TypeError(f"a pass must be callable as pass(graph) -> graph, got {p!r}")
    before = len(graph.nodes)
    start = time.perf_counter()
    out = p(graph)
    if not isinstance(out, Graph):
        raise TypeError(f"pass {getattr(p, 'name', p)!r} returned {type(out).__name__}, expected a Graph")
    if _active.stack and not isinstance(p, (Pipeline, Looped)):
        fired = getattr(p, "last_fired", None)
        detail = ", ".join(f"{rule} x{n}" for rule, n in fired.items()) if isinstance(fired, dict) else ""
        _active.stack[-1].add(_pass_name(p), before, len(out.nodes),
                              (time.perf_counter() - start) * 1e3, detail)
    return out


class logging_passes:
    """Context manager collecting a PassLog of every pass run inside it."""

    def __init__(self, log: PassLog):
        self.log = log

    def __enter__(self) -> PassLog:
        _active.stack.append(self.log)
        return self.log

    def __exit__(self, *exc: object) -> None:
        _active.stack.pop()


def _pass_name(p: Any) -> str:
    """A pass's `name`, else a function's __name__, else its class name."""
    return getattr(p, "name", None) or getattr(p, "__name__", None) or type(p).__name__


class Pipeline:
    """Run passes in order; a list of passes is a pass."""

    def __init__(self, passes: Iterable[Any], name: str | None = None):
        self.passes = list(passes)
        self.name = name or "Pipeline[" + ", ".join(_pass_name(p) for p in self.passes) + "]"

    def __call__(self, graph: Graph) -> Graph:
        for p in self.passes:
            graph = run_pass(p, graph)
        return graph


class Looped:
    """Run a pass until the graph stops changing (at most `max_iters` times)."""

    def __init__(self, inner: Any, max_iters: int = 16):
        self.inner = Pipeline(inner) if isinstance(inner, (list, tuple)) else inner
        self.max_iters = max_iters
        self.name = f"Looped({getattr(self.inner, 'name', type(self.inner).__name__)})"

    def __call__(self, graph: Graph) -> Graph:
        sig = graph.signature()
        for _ in range(self.max_iters):
            graph = run_pass(self.inner, graph)
            new_sig = graph.signature()
            if new_sig == sig:
                break
            sig = new_sig
        return graph


class Timed:
    """Run a pass and remember how long it took (`last_ms`, `total_ms`)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = f"Timed({getattr(inner, 'name', type(inner).__name__)})"
        self.last_ms = 0.0
        self.total_ms = 0.0

    def __call__(self, graph: Graph) -> Graph:
        start = time.perf_counter()
        graph = run_pass(self.inner, graph)
        self.last_ms = (time.perf_counter() - start) * 1e3
        self.total_ms += self.last_ms
        return graph


class FunctionPass:
    """Wrap a plain function `graph -> graph` as a named pass."""

    def __init__(self, fn: Callable[[Graph], Graph], name: str | None = None):
        self.fn = fn
        self.name = name or fn.__name__

    def __call__(self, graph: Graph) -> Graph:
        return self.fn(graph)
