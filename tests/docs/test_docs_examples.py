"""Every ```python block in README.md and docs/*.md runs, so the docs cannot rot.

Blocks of one file run in order in one shared namespace, so a later block may use
names from an earlier one. A block whose info string also says ``norun`` or
``no-run`` (```python norun) is skipped: use it only for source excerpts and
shell-like snippets that cannot run on their own. Relative links between the pages
must point at files that exist.
"""
from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import pytest

import kiln

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PAGES = ["getting-started.md", "how-compile-works.md", "debugging.md", "writing-passes.md", "api.md",
         "internals.md", "checkpoints.md", "coming-from-pytorch.md"]
FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```\s*$", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")
SKIP_WORDS = {"norun", "no-run"}


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, code) of the runnable python blocks of a Markdown file."""
    text = path.read_text()
    blocks = []
    for match in FENCE.finditer(text):
        words = match["info"].split()
        if words[:1] == ["python"] and not SKIP_WORDS & set(words):
            blocks.append((text.count("\n", 0, match.start()) + 1, match["body"]))
    return blocks


@pytest.mark.parametrize("path", [p for p in DOC_FILES if p.exists()], ids=lambda p: p.name)
def test_doc_code_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # blocks that write files write them here
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KILN_DEBUG", raising=False)
    saved_env = dict(os.environ)
    namespace: dict = {"__name__": f"doc_{path.stem}"}
    try:
        # A page may show one of kiln's warnings: recorded, so it neither fails the run nor clutters
        # the test output. NumPy's floating-point warnings must never leak out of kiln, docs included.
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("always")
            for line, code in python_blocks(path):
                try:
                    exec(compile(code, f"{path.name}:{line}", "exec"), namespace)  # noqa: S102 - our own docs
                except Exception as exc:  # noqa: BLE001 - re-raised with the block's location
                    raise AssertionError(f"{path.relative_to(ROOT)} block at line {line} failed: "
                                         f"{type(exc).__name__}: {exc}") from exc
        leaked = [str(w.message) for w in shown if " encountered in " in str(w.message)]
        assert not leaked, f"{path.relative_to(ROOT)}: NumPy warnings leaked out of kiln: {leaked}"
    finally:
        os.environ.clear()
        os.environ.update(saved_env)  # a page that sets KILN_DEBUG does not leak it
        kiln.autograd._state.enabled = True


def test_every_page_exists_and_shows_runnable_code():
    assert python_blocks(ROOT / "README.md"), "README.md should show at least one runnable example"
    for name in PAGES:
        page = ROOT / "docs" / name
        assert page.exists(), f"docs/{name} is missing"
        assert python_blocks(page), f"docs/{name} has no runnable python block"


@pytest.mark.parametrize("path", [p for p in DOC_FILES if p.exists()], ids=lambda p: p.name)
def test_relative_links_point_at_files(path):
    for match in LINK.finditer(path.read_text()):
        target = match["target"]
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (path.parent / target).exists(), f"{path.name} links to {target}, which does not exist"


def test_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    for name in PAGES:
        assert f"docs/{name}" in readme, f"README.md does not link docs/{name}"
