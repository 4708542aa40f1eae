"""Waiting on a non-blocking MPI request with a deadline, so a lost rank raises instead of hanging."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # process_group imports this module
    from .process_group import ProcessGroup


class DistTimeoutError(RuntimeError):
    """A collective did not complete within the process group's timeout."""


def wait(requests: Any | Sequence[Any], what: str, group: ProcessGroup) -> None:
    """Block until every request completes; raise DistTimeoutError after ``group.timeout``."""
    pending = list(requests) if isinstance(requests, (list, tuple)) else [requests]
    limit = group.timeout.total_seconds()
    start = time.monotonic()
    pause = 0.0
    while pending:
        pending = [r for r in pending if not r.Test()]
        if not pending:
            return
        elapsed = time.monotonic() - start
        if elapsed > limit:
            raise DistTimeoutError(
                f"kiln.distributed: {what} on rank {group.rank} of {group.size} did not complete within "
                f"{limit:g} s; another rank has stopped, crashed, or called a different collective. "
                "Fix: make every rank run the same collectives in the same order, or raise "
                "init_process_group(timeout=...)")
        if elapsed > 1e-3:  # spin briefly (short collectives), then stop burning a shared core
            pause = min(1e-3, max(2e-5, pause * 2))
            time.sleep(pause)
