"""Progress display for the demo: tqdm when installed, else a dependency-free line printer."""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class LineProgress:
    """A one-line progress bar redrawn with carriage returns (on a terminal, at most 10 times a second).

    Off a terminal (logs, CI) it stays quiet; the caller prints one summary line per epoch.
    """

    WIDTH = 24

    def __init__(self, total: int, desc: str, stream: TextIO | None = None):
        self.total, self.desc, self.n = total, desc, 0
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty()
        self.postfix = ""
        self._last_draw = 0.0

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.perf_counter()
        if self.live and (now - self._last_draw > 0.1 or self.n >= self.total):
            self._last_draw = now
            filled = int(self.WIDTH * self.n / max(self.total, 1))
            bar = "#" * filled + "." * (self.WIDTH - filled)
            self.stream.write(f"\r{self.desc} [{bar}] {self.n}/{self.total} {self.postfix}")
            self.stream.flush()

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def close(self) -> None:
        if self.live:
            self.stream.write("\r" + " " * (len(self.desc) + self.WIDTH + 40 + len(self.postfix)) + "\r")
            self.stream.flush()


def make_progress(total: int, desc: str) -> Any:
    """A progress bar with `update`, `set_postfix_str` and `close`: tqdm if importable."""
    try:
        from tqdm.auto import tqdm  # noqa: PLC0415
    except ImportError:
        return LineProgress(total, desc)
    return tqdm(total=total, desc=desc, leave=False, unit="step", dynamic_ncols=True,
                disable=None)  # None: no bar off a terminal (the per-epoch lines remain)


def tqdm_available() -> bool:
    try:
        import tqdm  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True
