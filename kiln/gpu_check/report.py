"""The check's Markdown report: the machine, the tests, the workloads against their targets."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from .probe import Machine
from .workloads import Result

# workload name prefix -> (the column kiln is compared with, the largest ratio that meets the target)
TARGETS = {"2 transformer blocks": ("torch.compile", 1.0), "LayerNorm+GELU": ("device copy", 1.5),
           "MLP": ("torch eager", 0.5)}
# skip reasons of tests that check a machine without a GPU: skipped on a GPU by design
EXPECTED_SKIP_PREFIX = "no-GPU behaviour"


@dataclass
class TestRun:
    """pytest's outcome, read from its JUnit XML: counts, and the names of failed and skipped tests."""

    status: str  # "ran", or why it did not run
    counts: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    expected_skips: list[str] = field(default_factory=list)  # tests of a machine without a GPU


def read_junit(path: Path, status: str) -> TestRun:
    """The `TestRun` in pytest's JUnit XML at `path` (an empty one with `status` when it is missing)."""
    if not path.is_file():
        return TestRun(status if status != "ran" else "pytest wrote no JUnit XML")
    run = TestRun(status, {"tests": 0, "failures": 0, "errors": 0, "skipped": 0})
    for case in ET.parse(path).getroot().iter("testcase"):
        run.counts["tests"] += 1
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        for kind, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
            found = case.find(kind)
            if found is not None:
                run.counts[key] += 1
                message = (found.get('message') or '').strip()
                entry = f"{name}: {message[:200]}"
                if kind != "skipped":
                    run.failed.append(entry)
                elif EXPECTED_SKIP_PREFIX in message:
                    run.expected_skips.append(entry)
                else:
                    run.skipped.append(entry)
    return run


def verdict(result: Result) -> str:
    """'met', 'missed' (with the ratio), or why the target could not be judged."""
    for prefix, (column, limit) in TARGETS.items():
        if result.name.startswith(prefix):
            if "kiln.compile" not in result.ms or column not in result.ms:
                return f"not judged: no {'kiln.compile' if 'kiln.compile' not in result.ms else column} time"
            ratio = result.ms["kiln.compile"] / result.ms[column]
            return f"{'met' if ratio <= limit else 'MISSED'}: {ratio:.2f}x {column} (target <= {limit}x)"
    return "no target"


def render(machine: Machine, device: str, tests: TestRun | None, results: list[Result] | None,
           seconds: float) -> str:
    """The whole report as Markdown."""
    lines = ["# kiln GPU check", "", f"Device: `{device}`. Took {seconds:.0f} s.", ""]
    if machine.no_gpu:
        lines += [f"**no GPU: {machine.no_gpu}.** Nothing GPU-related ran.", ""]
    lines += ["## Machine", "", "| fact | value |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in machine.facts.items()] + [""]
    if tests is not None:
        lines += ["## Tests (tests/cuda, tests/devices)", ""]
        if tests.counts:
            lines.append(", ".join(f"{v} {k}" for k, v in tests.counts.items()) + f" ({tests.status})")
        else:
            lines.append(f"did not run: {tests.status}")
        for title, names in (("Failed", tests.failed), ("Skipped (none should be, on a GPU)", tests.skipped),
                             ("Skipped by design (they check a machine without a GPU)", tests.expected_skips)):
            if names:
                lines += ["", f"{title}:", ""] + [f"- `{n}`" for n in names[:60]]
                if len(names) > 60:
                    lines.append(f"- ... and {len(names) - 60} more (junit.xml)")
        lines.append("")
    if results is not None:
        columns = sorted({c for r in results for c in r.ms}, key=_column_order)
        lines += ["## Workloads (median ms per call)", "", "| workload | " + " | ".join(columns) + " | target |",
                  "| --- |" + " ---: |" * len(columns) + " --- |"]
        for r in results:
            cells = [f"{r.ms[c]:.3f}" if c in r.ms else "-" for c in columns]
            lines.append(f"| {r.name} | " + " | ".join(cells) + f" | {verdict(r)} |")
        errors = [(r.name, c, e) for r in results for c, e in r.errors.items()]
        if errors:
            lines += ["", "Errors (tracebacks in workloads.log):", ""]
            lines += [f"- {name} / {column}: `{error[:300]}`" for name, column, error in errors]
        lines.append("")
    return "\n".join(lines)


def _column_order(column: str) -> tuple:
    order = ["kiln.compile", "torch eager", "torch.compile", "device copy"]
    return (order.index(column) if column in order else len(order), column)
