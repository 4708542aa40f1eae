"""A time-boxed fuzzing campaign: batches of hypothesis-generated programs with fresh seeds.

Each batch draws programs (op programs, or module programs one batch in `module_every`)
under one random seed. A mismatch stops the batch; hypothesis then shrinks the
program to a minimal one, which the campaign records before moving on to the
next seed. `python -m kiln.fuzz` prints the summary and the first few failures.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from .harness import check_program
from .minimize import minimize
from .modules import check_module_program, module_programs
from .strategies import programs


@dataclass
class Failure:
    """One mismatch: the program as first found, its shrunk form, and what differed."""

    kind: str  # "program" or "module"
    found: Any
    minimal: Any
    problems: list[str]


@dataclass
class Campaign:
    """Counts of a campaign so far."""

    programs: int = 0  # op programs checked (not counting shrinking re-runs)
    modules: int = 0  # module programs checked
    eager_errors: int = 0  # programs whose eager run raised (compiled raised the same)
    fallbacks: int = 0  # programs a backend ran by falling back to eager
    failures: list[Failure] = field(default_factory=list)

    @property
    def ran(self) -> int:
        return self.programs + self.modules

    def summary(self) -> str:
        return (f"ran {self.ran} programs ({self.programs} op programs, {self.modules} module programs): "
                f"{len(self.failures)} mismatched; {self.eager_errors} raised the same error eager and "
                f"compiled; {self.fallbacks} fell back to eager")


SHRINK_SECONDS = 60  # at most this long shrinking each failure


class _Stop(Exception):
    """Raised inside a hypothesis test to end a failing batch (hypothesis then shrinks)."""


def _problems(program: Any, modules: bool) -> list[str]:
    return _check(program, modules)[0]


def _check(program: Any, modules: bool) -> tuple[list[str], Any]:
    """(mismatches, the op program's Result or None); a crash of the harness itself is a mismatch too."""
    try:
        if modules:
            return check_module_program(program), None
        result = check_program(program)
        return result.mismatches, result
    except Exception as exc:  # noqa: BLE001 - reported (and shrunk) like any other failure
        return [f"the harness raised {type(exc).__name__}: {exc}"], None


def run_batch(campaign: Campaign, seed: int, examples: int, deadline: float, modules: bool,
              max_ops: int = 6, shrink: bool = True) -> None:
    """Check up to `examples` programs drawn with `seed`; record the (shrunk) failure, if any."""
    state: dict[str, Any] = {"failed": None, "last": None}

    def check(program: Any) -> None:
        if state["failed"] is None and time.monotonic() > deadline:
            return  # out of time: the rest of the batch passes trivially
        if state["failed"] is not None and time.monotonic() > state["shrink_until"]:
            return  # shrinking has had long enough: keep the smallest failure so far
        problems, result = _check(program, modules)
        if state["failed"] is None:
            if modules:
                campaign.modules += 1
            else:
                campaign.programs += 1
                campaign.eager_errors += result is not None and result.eager_error is not None
                campaign.fallbacks += result is not None and result.fallback
        if problems:
            if state["failed"] is None:
                state["failed"] = program
                state["shrink_until"] = time.monotonic() + SHRINK_SECONDS
            state["last"] = (program, problems)
            raise _Stop("\n".join(problems))

    strategy = module_programs() if modules else programs(max_ops=max_ops)
    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]
    test: Callable = given(strategy)(check)
    test = settings(max_examples=examples, deadline=None, database=None, derandomize=False, phases=phases,
                    suppress_health_check=list(HealthCheck), report_multiple_bugs=False)(test)
    test = hypothesis_seed(seed)(test)
    try:
        test()
    except _Stop:
        pass
    except Exception:  # hypothesis wraps the failure in its own error types
        if state["last"] is None:
            raise
    if state["last"] is not None:
        minimal, problems = state["last"]
        if shrink:
            minimal = minimize(minimal, lambda p: bool(_problems(p, modules)))
            problems = _problems(minimal, modules) or problems
        campaign.failures.append(Failure("module" if modules else "program", state["failed"], minimal, problems))


def run_campaign(seconds: float, seed: int | None = None, batch: int = 50, module_every: int = 4,
                 max_ops: int = 6, progress: Callable[[str], None] | None = None, shrink: bool = True) -> Campaign:
    """Fuzz for `seconds`; `seed` makes the sequence of batch seeds reproducible."""
    rng = random.Random(seed)
    campaign = Campaign()
    deadline = time.monotonic() + seconds
    n = 0
    last_report = time.monotonic()
    while time.monotonic() < deadline:
        batch_seed = rng.getrandbits(32)
        modules = module_every > 0 and n % module_every == module_every - 1
        run_batch(campaign, batch_seed, batch if not modules else max(batch // 5, 1), deadline, modules,
                  max_ops=max_ops, shrink=shrink)
        n += 1
        if progress is not None and time.monotonic() - last_report > 30:
            last_report = time.monotonic()
            progress(f"  ... {campaign.summary()}")
    return campaign
