"""The PyTorch API coverage table (kiln/api_coverage/table.json) and the docs made from it.

A name marked present must stay in kiln; the docs must show the table as it is; and where
the same PyTorch is installed, the table must be up to date (a name added to kiln, or one
PyTorch added, means running ``python -m kiln.api_coverage --write``).
"""
from __future__ import annotations

import ast

import pytest

from kiln.api_coverage import AREAS, build, load, render_counts, render_page
from kiln.api_coverage.table import COUNTS_END, COUNTS_START, GUIDE_PATH, PAGE_PATH
from kiln.api_coverage.usage import _count_file

TABLE = load()


@pytest.mark.parametrize("area", AREAS, ids=[a.key for a in AREAS])
def test_every_name_marked_present_is_in_kiln(area):
    present = [n for n, e in TABLE["areas"][area.key].items() if e["status"] == "present"]
    assert len(present) > 5
    gone = [n for n in present if not area.kiln_has(n)]
    assert not gone, f"{area.kiln_module} lost names the coverage table marks present: {gone}"


def test_refused_names_say_why():
    refused = [(k, n, e) for k, entries in TABLE["areas"].items() for n, e in entries.items()
               if e["status"] == "refused"]
    assert refused and all(len(e["reason"]) > 20 for _, _, e in refused)


def test_the_docs_show_the_table():
    assert PAGE_PATH.read_text() == render_page(TABLE)
    guide = GUIDE_PATH.read_text()
    block = guide[guide.index(COUNTS_START) + len(COUNTS_START):guide.index(COUNTS_END)]
    assert block.strip() == render_counts(TABLE).strip()


def test_the_table_is_up_to_date_with_kiln_and_the_installed_pytorch():
    torch = pytest.importorskip("torch")
    if torch.__version__.split("+")[0] != TABLE["torch_version"]:
        pytest.skip(f"the table lists torch {TABLE['torch_version']}, torch {torch.__version__} is installed")
    uses = {key: {n: e["uses"] for n, e in entries.items()} for key, entries in TABLE["areas"].items()}
    fresh = build(TABLE["torch_version"], uses, TABLE["corpus"])
    changed = {key: sorted(n for n in set(fresh["areas"][key]) | set(TABLE["areas"][key])
                           if fresh["areas"][key].get(n) != TABLE["areas"][key].get(n))
               for key in fresh["areas"]}
    changed = {k: v for k, v in changed.items() if v}
    assert not changed, f"stale coverage table (run python -m kiln.api_coverage --write): {changed}"


def test_uses_are_counted_through_import_aliases():
    from collections import Counter

    source = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch import optim

x = torch.zeros(3).view(-1)
layer = nn.Linear(2, 2)
y = F.relu(x) + torch.nn.functional.relu(x)
loader = DataLoader([])
opt = optim.SGD([], lr=0.1)
"""
    qualified, attributes = Counter(), Counter()
    _count_file(ast.parse(source), qualified, attributes)
    assert qualified["torch.zeros"] == 1 and qualified["torch.nn.Linear"] == 1
    assert qualified["torch.nn.functional.relu"] == 2
    assert qualified["torch.utils.data.DataLoader"] == 1 and qualified["torch.optim.SGD"] == 1
    assert attributes["view"] == 1 and attributes["zeros"] == 0
