"""An uncaught exception on one rank aborts every rank, naming the rank that failed.

Without this, the other ranks would wait in their next collective until the timeout. The
launcher (`kiln.distributed.run`) also reads the per-rank status files written here to print
one line per rank when the job fails.
"""
from __future__ import annotations

import atexit
import os
import sys
import traceback
from types import TracebackType
from typing import Any

from .process_group import ProcessGroup

STATUS_DIR_VARIABLE = "KILN_DIST_STATUS_DIR"

_previous_hook: Any = None
_group: ProcessGroup | None = None
_failed = False


def write_status(rank: int, text: str) -> None:
    """Record this rank's state for the launcher (a no-op outside `kiln.distributed.run`)."""
    folder = os.environ.get(STATUS_DIR_VARIABLE)
    if not folder:
        return
    try:
        with open(os.path.join(folder, f"rank{rank}"), "w", encoding="utf-8") as f:
            f.write(text)
    except OSError:
        pass


def _on_uncaught(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    group = _group
    if group is None:
        (_previous_hook or sys.__excepthook__)(kind, value, tb)
        return
    summary = f"{kind.__name__}: {value}".strip()
    traceback.print_exception(kind, value, tb)
    print(f"kiln.distributed: rank {group.rank} of {group.size} failed with {summary}; aborting all "
          f"{group.size} ranks", file=sys.stderr, flush=True)
    global _failed
    _failed = True
    write_status(group.rank, f"failed: {summary}")
    sys.stdout.flush()
    group.comm.Abort(1)


def _on_exit() -> None:
    if _group is not None and not _failed:
        write_status(_group.rank, "ok")


def install_abort_on_error(group: ProcessGroup) -> None:
    """Make an uncaught exception on this rank print its rank and abort the whole world."""
    global _previous_hook, _group
    _group = group
    if sys.excepthook is not _on_uncaught:
        _previous_hook = sys.excepthook
        sys.excepthook = _on_uncaught
    write_status(group.rank, "running")
    atexit.register(_on_exit)


def uninstall_abort_on_error() -> None:
    """Restore the previous excepthook (after `destroy_process_group`)."""
    global _group
    if _group is not None:
        write_status(_group.rank, "ok")
    _group = None
    if sys.excepthook is _on_uncaught:
        sys.excepthook = _previous_hook or sys.__excepthook__
    atexit.unregister(_on_exit)
