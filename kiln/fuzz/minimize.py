"""Shrinking on the program IR, after hypothesis: drop statements and simplify while it still fails.

Hypothesis shrinks the choices that drew a program; some statements survive that
only because removing them would shift later draws. `minimize` finishes the job
directly on the statements: delete one, drop an output, make an input plain
(contiguous, normal data, no grad), and keep each change that still mismatches.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterator

from .modules import ModuleProgram
from .programs import Input, Op, Program


def _delete(p: Program, i: int) -> Program | None:
    """`p` without statement i (later value numbers shift down), or None if something uses it."""
    if any(isinstance(s, Op) and i in s.args for s in p.stmts[i + 1:]):
        return None
    outputs = tuple(o for o in p.outputs if o != i)
    if not outputs:
        return None
    shift = lambda v: v - 1 if v > i else v  # noqa: E731
    stmts = [s if isinstance(s, Input) else Op(s.name, tuple(shift(a) for a in s.args), s.params)
             for k, s in enumerate(p.stmts) if k != i]
    return dataclasses.replace(p, stmts=stmts, outputs=tuple(shift(o) for o in outputs))


def _simpler_programs(p: Program) -> Iterator[Program]:
    for i in reversed(range(len(p.stmts))):
        q = _delete(p, i)
        if q is not None:
            yield q
    if len(p.outputs) > 1:
        for k in range(len(p.outputs)):
            yield dataclasses.replace(p, outputs=p.outputs[:k] + p.outputs[k + 1:])
    for i, s in enumerate(p.stmts):
        if not isinstance(s, Input):
            continue
        for change in ({"view": "contiguous"}, {"grad": False},
                       {"fill": "normal"} if s.fill in ("special", "ties", "positive") else {}):
            t = dataclasses.replace(s, **change)
            if t != s:
                yield dataclasses.replace(p, stmts=p.stmts[:i] + [t] + p.stmts[i + 1:])
    if p.no_grad:
        yield dataclasses.replace(p, no_grad=False)
    if p.seed:
        yield dataclasses.replace(p, seed=0)


def _simpler_modules(p: ModuleProgram) -> Iterator[ModuleProgram]:
    for i in reversed(range(len(p.layers) - 1)):
        yield dataclasses.replace(p, layers=p.layers[:i] + p.layers[i + 1:])
    if p.steps > 1:
        yield dataclasses.replace(p, steps=1)
    if p.dynamic:
        yield dataclasses.replace(p, dynamic=False)
    if (p.optimizer, p.opt_kwargs) != ("SGD", {"lr": 0.1}):
        yield dataclasses.replace(p, optimizer="SGD", opt_kwargs={"lr": 0.1})
    if p.seed:
        yield dataclasses.replace(p, seed=0)


def minimize(program: Program | ModuleProgram, fails: Callable[[object], bool], budget: int = 400,
             seconds: float = 60.0):
    """The smallest variant of `program` found for which `fails` still holds (at most `budget`
    checks and about `seconds`)."""
    simpler = _simpler_modules if isinstance(program, ModuleProgram) else _simpler_programs
    deadline = time.monotonic() + seconds
    checks = 0
    improved = True
    while improved:
        improved = False
        for candidate in simpler(program):
            checks += 1
            if fails(candidate):
                program = candidate
                improved = True
                break
            if checks >= budget or time.monotonic() > deadline:
                return program
    return program

