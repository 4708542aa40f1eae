"""An uncaught exception on one rank aborts every rank, naming the rank that failed.

Without this, the other ranks would wait in their next collective until the timeout. The
launcher (`kiln.distributed.run`) also reads the per-rank status files written here to print
one line per rank when the job fails.
"""
from __future__ import annotations

import atexit
import os
import stat
import sys
import time
import traceback
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # process_group imports this module
    from .process_group import ProcessGroup

STATUS_DIR_VARIABLE = "KILN_DIST_STATUS_DIR"
DRAIN_SECONDS = 5.0  # how long a failing rank waits for the launcher to read its error message

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
    drain_output(DRAIN_SECONDS)
    group.comm.Abort(1)


def _unread_bytes(fd: int) -> int:
    """Bytes written to pipe `fd` that its reader has not read yet (0 for anything but a pipe)."""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return 0
        import array  # noqa: PLC0415 - only a failing rank needs these
        import fcntl  # noqa: PLC0415
        import termios  # noqa: PLC0415

        count = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, count, True)
        return count[0]
    except (OSError, ImportError, ValueError):
        return 0


def drain_output(limit: float, fds: tuple[int, ...] = (1, 2)) -> None:
    """Wait (up to `limit` seconds) until mpiexec has read everything this rank wrote to `fds`.

    MPI_Abort makes mpiexec tear the job down at once; output still sitting in the pipe
    to mpiexec is then lost, error message included. So a failing rank first waits for
    those pipes to empty, which takes milliseconds unless mpiexec has stopped reading.
    """
    deadline = time.monotonic() + limit
    while any(_unread_bytes(fd) for fd in fds) and time.monotonic() < deadline:
        time.sleep(0.005)


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
