"""Plain-text tables and JSON files for benchmark results."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence


def fmt(value: float | None, digits: int = 3) -> str:
    """A number with `digits` significant digits, or "-" when missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    return f"{value:.{decimals}f}"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


NOISY_SPREAD = 0.25  # IQR / median above this marks a measurement as noisy
NOISY_NOTE = ("* noisy: the middle half of the samples spans more than 25% of the median, so the machine "
              "was probably busy; rerun when it is idle, or raise --repeat")


def fmt_timing(timing: Any, scale: float) -> str:
    """A timing's median in units of `scale` seconds, with "*" appended when its spread is large."""
    if timing is None:
        return "-"
    text = fmt(timing.median / scale)
    return text + "*" if is_noisy(timing) else text


def is_noisy(timing: Any) -> bool:
    return timing is not None and timing.median > 0 and timing.iqr / timing.median > NOISY_SPREAD


class Table:
    """A text table with a header row; numeric-looking columns are right-aligned.

    >>> t = Table(["case", "kiln"]); t.add_row(["add", "3.1"]); print(t.render())
    """

    def __init__(self, columns: Sequence[str]):
        self.columns = list(columns)
        self.rows: list[list[str]] = []

    def add_row(self, cells: Sequence[Any]) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"Table.add_row: expected {len(self.columns)} cells, got {len(cells)}")
        self.rows.append([str(c) for c in cells])

    def render(self) -> str:
        widths = [max(len(r[i]) for r in [self.columns, *self.rows]) for i in range(len(self.columns))]
        right = [i > 0 and all(_numeric(r[i]) for r in self.rows) for i in range(len(self.columns))]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()

        rule = "  ".join("-" * w for w in widths)
        return "\n".join([line(self.columns), rule, *(line(r) for r in self.rows)])


def _numeric(cell: str) -> bool:
    return cell == "-" or cell.rstrip("x*").replace(".", "", 1).replace("-", "", 1).isdigit()


def write_json(path: str | Path, payload: dict) -> Path:
    """Write `payload` as indented JSON; an OSError names the path and the reason."""
    target = Path(path)
    try:
        if target.parent != Path("."):
            target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(payload, indent=2) + "\n")
    except OSError as exc:
        raise OSError(f"cannot write benchmark results to {target}: {exc.strerror or exc}") from None
    return target
