"""The pass protocol: any object with `name` and `__call__(graph) -> graph`.

A list of passes is itself a pass (`Pipeline`). `Looped(p)` repeats `p` until the
graph stops changing; `Timed(p)` records how long it took. Every pass run through
`run_pass` is logged with node counts before and after (and the graph it returned,
when it returned a new one), which `explain()` and KILN_DEBUG show.

`run_pass` is also where graphs are checked: when verification is on (KILN_DEBUG is
set, or `debug.set_verify(True)`, which the test suite does), the graph given to the
outermost `run_pass` and every new graph a pass returns go through `Graph.verify`,
so a broken graph is reported naming the pass that broke it.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol, runtime_checkable

from .. import debug
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
    graph: Graph | None = None  # the graph the pass returned, when it was a new one (see PassLog.graphs)

    def label(self) -> str:
        return f"after {self.name} ({self.nodes_before} -> {self.nodes_after} nodes)"


@dataclass
class PassLog:
    """What each pass did to the node count, in order.

    It also keeps the graph the first pass was given (`input`) and each new graph a pass
    returned (`PassRecord.graph`), so `graphs()` can show the graph after every pass
    that changed it. `drop_graphs()` lets them go (a compiled function keeps the graphs
    of its latest compile only).
    """

    records: list[PassRecord] = field(default_factory=list)
    input: Graph | None = None

    def add(self, name: str, before: int, after: int, ms: float, detail: str = "",
            graph: Graph | None = None) -> None:
        self.records.append(PassRecord(name, before, after, ms, detail, graph))

    def graphs(self) -> list[tuple[str, str]]:
        """(label, xpr text): the input graph, then the graph after each pass that changed it.

        A pass that returned a new graph printing the same as the one before it (a copy
        with nothing changed) is left out.
        """
        if self.input is None:
            return []
        first, after = self.changed_texts()
        return [("before the passes", first)] + [(self.records[i].label(), text) for i, text in after.items()]

    def changed_texts(self) -> tuple[str, dict[int, str]]:
        """The input graph's text, and {record index: text} for each pass that changed the graph."""
        last = first = self.input.to_text() if self.input is not None else ""
        after: dict[int, str] = {}
        for i, r in enumerate(self.records):
            if r.graph is not None:
                text = r.graph.to_text()
                if text != last:
                    after[i] = last = text
        return first, after

    def graphs_text(self, indent: str = "    ") -> str:
        """`graphs()` as one text block: a label line, then the indented graph, per graph."""
        if self.input is None:
            return indent + "(no graphs recorded)"
        lines = []
        for label, text in self.graphs():
            lines.append(f"{indent}{label}:")
            lines.extend(indent + "  " + line for line in text.splitlines())
        return "\n".join(lines)

    def drop_graphs(self) -> None:
        """Forget the recorded graphs (node counts, times and rules stay)."""
        self.input = None
        for r in self.records:
            r.graph = None

    def __str__(self) -> str:
        lines = [f"  {r.name:<28} {r.nodes_before:>5} -> {r.nodes_after:<5} nodes  {r.ms:7.2f} ms"
                 + (f"  [{r.detail}]" if r.detail else "") for r in self.records]
        return "\n".join(lines)


class _ActiveLogs(threading.local):
    """The logs being collected on this thread (threads compile concurrently)."""

    def __init__(self) -> None:
        self.stack: list[PassLog] = []
        self.depth = 0  # run_pass calls in progress (0: the next one is outermost)


_active = _ActiveLogs()


def run_pass(p: Any, graph: Graph) -> Graph:
    """Apply one pass (or a list of passes), logging it when a log is active.

    When verification is on (`debug.verify_enabled()`), the graph given to the outermost
    call and each new graph a pass returns are checked with `Graph.verify`.
    """
    if isinstance(p, (list, tuple)):
        p = Pipeline(p)
    if not callable(p):
        raise TypeError(f"a pass must be callable as pass(graph) -> graph, got {p!r}")
    verify = debug.verify_enabled()
    if verify and _active.depth == 0:
        graph.verify(after=graph.last_pass, where=None if graph.last_pass else
                     f"the graph given to pass {_pass_name(p)}, before any pass ran")
    before = len(graph.nodes)
    start = time.perf_counter()
    _active.depth += 1
    try:
        out = p(graph)
    finally:
        _active.depth -= 1
    if not isinstance(out, Graph):
        raise TypeError(f"pass {getattr(p, 'name', p)!r} returned {type(out).__name__}, expected a Graph")
    if isinstance(p, (Pipeline, Looped)):
        return out  # each pass inside was verified and logged on its own
    ms = (time.perf_counter() - start) * 1e3
    leaf = not isinstance(p, Timed)  # Timed: its inner pass was verified, and its graph kept, already
    if out is not graph and leaf:
        out.last_pass = _pass_name(p)
        if verify:
            out.verify(after=out.last_pass)
    if _active.stack:
        log = _active.stack[-1]
        if log.input is None and not log.records:
            log.input = graph
        fired = getattr(p, "last_fired", None)
        detail = ", ".join(f"{rule} x{n}" for rule, n in fired.items()) if isinstance(fired, dict) else ""
        log.add(_pass_name(p), before, len(out.nodes), ms, detail, out if out is not graph and leaf else None)
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
