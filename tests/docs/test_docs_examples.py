"""Every ```python block in README.md and docs/*.md runs, so the docs cannot rot.

Blocks whose info string also says ``norun`` (```python norun) are source excerpts
and are skipped. Blocks of one file run in order in a shared namespace, so a later
block may use names from an earlier one.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```\s*$", re.S | re.M)


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, code) of the runnable python blocks of a Markdown file."""
    text = path.read_text()
    blocks = []
    for match in FENCE.finditer(text):
        words = match["info"].split()
        if words[:1] == ["python"] and "norun" not in words:
            blocks.append((text.count("\n", 0, match.start()) + 1, match["body"]))
    return blocks


@pytest.mark.parametrize("path", [p for p in DOC_FILES if p.exists()], ids=lambda p: p.name)
def test_doc_code_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # blocks that write files write them here
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    namespace: dict = {"__name__": f"doc_{path.stem}"}
    for line, code in python_blocks(path):
        try:
            exec(compile(code, f"{path.name}:{line}", "exec"), namespace)  # noqa: S102 - our own docs
        except Exception as exc:  # noqa: BLE001 - re-raised with the block's location
            raise AssertionError(f"{path.relative_to(ROOT)} block at line {line} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc


def test_the_readme_has_runnable_blocks():
    assert python_blocks(ROOT / "README.md"), "README.md should show at least one runnable example"
    assert os.path.exists(ROOT / "docs" / "internals.md")
