"""Where the user's code is on the stack: for messages that name the user's line, and for warnings
that point at it."""
from __future__ import annotations

import os
import sys

_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_location() -> str:
    """`file:line` of the innermost stack frame outside the kiln package."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_KILN_DIR + os.sep):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


def user_stacklevel() -> int:
    """The `stacklevel` for warnings.warn called by our caller that points at the innermost frame
    outside the kiln package (so a warning names the user's line, however deep kiln's stack is)."""
    frame = sys._getframe(2)  # our caller's caller: the frame warnings.warn(stacklevel=1) would name...
    level = 2  # ...is one above our caller, so counting starts at 2 from warnings.warn's point of view
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_KILN_DIR + os.sep):
        frame = frame.f_back
        level += 1
    return level
