"""Data-dependent branches in compiled functions: one plan per path, guarded on the branch values.

``if h.sum() > 0:`` inside a compiled function takes ``bool()`` of a traced tensor. The trace
follows the path the call took and records the tensor and its truth (`Tracer.branches`). The
plan compiled from it returns those tensors after the user's outputs, and every replay checks
them: where each is as true as when traced, the call took the same path, and the plan's
outputs are the call's. Where one is not, the call went another way: the outputs are thrown
away, and the plans of the other paths this call signature has met are tried in turn, the
most recently used first; a path not met before is traced (the trace runs the call, so its
result is eager's) and kept as one more plan, up to MAX_PATHS.

A replay that runs a wrong path changes nothing outside itself, because only plans without
side effects get branch guards: inference plans with no state writes (no in-place update of
an input, parameter or buffer) and no random draws (a wrong path would use up random
numbers). A trace with a branch that is not such a plan falls back to eager, as any
data-dependent Python did before. ``fullgraph=True`` still refuses data-dependent branches.
An error raised by a plan with branch guards (a check on a wrong path) counts as a wrong path.

``.item()`` and ``float()`` of a traced tensor are not branches: the Python number they give
can be used in any way, so they still fall back to eager.
"""
from __future__ import annotations

from typing import Any

import numpy as np

MAX_PATHS = 8  # paths one call signature keeps plans for; past that it runs eagerly

WRONG_PATH = object()  # what a replay returns when a branch went another way than when traced


def branch_problem(graph: Any, binding: Any, training: bool) -> str | None:
    """Why a trace with branches cannot be replayed speculatively (see the module docstring), or None."""
    if training:
        return "its outputs need gradients (the compiled backward would follow one path)"
    if graph.state_writes:
        return "it updates state in place (a wrong path would change it)"
    if binding is not None:
        return "it is a whole training step"
    if any(spec.kind == "rng" for spec in graph.specs):
        return "it draws random numbers (a wrong path would use them up)"
    return None


def took_the_same_path(outs: list, expected: tuple[bool, ...]) -> bool:
    """Whether the branch values at the end of `outs` are as true as `expected` (traced) ones."""
    n = len(outs) - len(expected)
    return all(bool(np.asarray(out).reshape(())) is want for out, want in zip(outs[n:], expected))


def describe(branches: list) -> list[str]:
    """explain() lines for the branches a trace followed."""
    return [f"  branch: bool() of a traced tensor at {where} was {truth}; the plan follows this path and "
            "checks it on every call (another path gets its own plan)" for _, truth, where in branches]
