"""KILN_DEBUG: log what the JIT does (traces, cache misses with reasons, pass timings).

Set the environment variable before or while running::

    KILN_DEBUG=1 python train.py               # everything ("1", "true", "yes" and "all" work)
    KILN_DEBUG=miss,passes python train.py     # a comma list of topics: trace, miss, passes, graphs, kernels, verify

`graphs` logs the graph text after each pass that changed it, `kernels` the kernel IR of each
fused kernel a cpu plan runs (render/kernel_ir.py). `verify` checks every graph
a pass returns (`Graph.verify`); any KILN_DEBUG setting that switches a topic on does that
too, and `set_verify(True)` does it with KILN_DEBUG unset (the test suite turns it on).

Records go to the standard ``logging`` logger ``"kiln.jit"`` at DEBUG level. When the
application has configured no logging handler, they are printed to stderr as
``[kiln.jit] ...`` lines; otherwise they reach the application's handlers. The variable is
read on every event, so it can be switched on and off while a program runs. Only the
compile path (misses) logs; a cache hit costs nothing extra.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Any, Iterable

ENV_VAR = "KILN_DEBUG"
TOPICS = ("trace", "miss", "passes", "graphs", "kernels", "verify")
_ALL = frozenset(TOPICS)
_ON = {"1", "true", "yes", "all", "on"}
_OFF = {"", "0", "false", "no", "none", "off"}
_ALIASES = {"trace": "trace", "traces": "trace", "miss": "miss", "misses": "miss",
            "pass": "passes", "passes": "passes", "graph": "graphs", "graphs": "graphs",
            "kernel": "kernels", "kernels": "kernels", "verify": "verify"}

logger = logging.getLogger("kiln.jit")
_warned: set[str] = set()
_always_verify = False  # set_verify(True): verify every pass's graph even with KILN_DEBUG unset


def enabled_topics(value: str | None = None) -> frozenset[str]:
    """The topics KILN_DEBUG switches on (read from the environment unless `value` is given)."""
    raw = os.environ.get(ENV_VAR, "") if value is None else value
    words = [w.strip().lower() for w in raw.split(",")]
    if all(w in _OFF for w in words):
        return frozenset()
    topics: set[str] = set()
    for word in words:
        if word in _ON:
            return _ALL
        if word in _ALIASES:
            topics.add(_ALIASES[word])
        elif word not in _OFF and word not in _warned:
            _warned.add(word)
            _log(f"KILN_DEBUG: unknown topic {word!r} ignored; use 1 (everything) or a comma list "
                 f"of {', '.join(TOPICS)}")
    return frozenset(topics)


def enabled(topic: str) -> bool:
    """Whether KILN_DEBUG asks for `topic` right now."""
    value = os.environ.get(ENV_VAR)
    return bool(value) and topic in enabled_topics(value)


def set_verify(on: bool) -> bool:
    """Verify every graph a pass returns (`Graph.verify`) whatever KILN_DEBUG says; returns the old setting."""
    global _always_verify
    old, _always_verify = _always_verify, bool(on)
    return old


def verify_enabled() -> bool:
    """Whether passes' graphs are verified now: `set_verify(True)`, or KILN_DEBUG switches any topic on."""
    if _always_verify:
        return True
    value = os.environ.get(ENV_VAR)
    return bool(value) and bool(enabled_topics(value))


class _StderrHandler(logging.Handler):
    """Prints to the current sys.stderr, but only when no other handler would get the record.

    That is the rule of logging's own last-resort handler, at DEBUG level: an application
    that configured logging (on the root logger, or on "kiln.jit" itself) gets the
    records through its handlers, never twice.
    """

    def emit(self, record: logging.LogRecord) -> None:
        if any(h is not self for h in logger.handlers):
            return
        parent = logger.parent if logger.propagate else None
        while parent is not None:
            if parent.handlers:
                return
            parent = parent.parent if parent.propagate else None
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging must never break the program
            self.handleError(record)


_handler = _StderrHandler()
_handler.setFormatter(logging.Formatter("[kiln.jit] %(message)s"))


def _log(message: str) -> None:
    if _handler not in logger.handlers:
        logger.addHandler(_handler)
    if logger.level == logging.NOTSET:  # the user has not chosen a level for kiln.jit
        logger.setLevel(logging.DEBUG)
    logger.debug(message)


def _count(items: Any, noun: str) -> str:
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'}"


def log_trace(name: str, graph: Any, graph_break: str | None = None) -> None:
    """One trace of `name`: its node, input and output counts (and a graph break, if any)."""
    if not enabled("trace"):
        return
    text = (f"trace {name}: {_count(graph.nodes, 'node')}, {_count(graph.inputs, 'input')}, "
            f"{_count(graph.outputs, 'output')}")
    if graph.state_writes:
        text += f", {_count(graph.state_writes, 'state write')}"
    if graph_break is not None:
        text += f"; graph break, this signature runs eagerly: {graph_break}"
    _log(text)


def log_miss(name: str, number: int, reasons: Iterable[str]) -> None:
    """Cache miss number `number` of `name`, with the reasons explain() gives."""
    if enabled("miss"):
        _log(f"cache miss #{number} of {name}: " + "; ".join(reasons))


def log_kernels(graph: Any) -> None:
    """The kernel IR of each fused kernel in a lowered `graph` (topic `kernels`)."""
    if not enabled("kernels"):
        return
    for node in graph.nodes:
        if hasattr(node.prim, "kernel_ir"):
            _log(f"kernel IR:\n{node.prim.kernel_ir.text()}")


def log_lowering(message: str) -> None:
    """A lowering decision (topic `kernels`): why a plan for every size of its dynamic dims stays in Python."""
    if enabled("kernels"):
        _log(message)


def log_passes(name: str, log: Any, backward_log: Any = None) -> None:
    """Each pass of a compile: name, nodes before -> after, milliseconds (forward, then backward);
    with the `graphs` topic, the graph text before the first pass and after each pass that changed it."""
    topics = enabled_topics() if os.environ.get(ENV_VAR) else frozenset()
    passes, graphs = "passes" in topics, "graphs" in topics
    if not (passes or graphs):
        return
    for label, records in (("forward", log), ("backward", backward_log)):
        if records is None:
            continue
        first, changed = records.changed_texts() if graphs else ("", {})
        if graphs and records.input is not None:
            _log(f"graph {name} {label} before the passes:\n{first}")
        for i, r in enumerate(records.records):
            if passes:
                detail = f"  [{r.detail}]" if r.detail else ""
                _log(f"pass {name} {label} {r.name}: {r.nodes_before} -> {r.nodes_after} nodes, "
                     f"{r.ms:.3f} ms{detail}")
            if i in changed:
                _log(f"graph {name} {label} {r.label()}:\n{changed[i]}")
