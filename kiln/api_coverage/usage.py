"""How often training code uses each PyTorch name: counted in a folder of Python files.

Imports are followed (``import torch.nn as nn``, ``from torch.nn import functional as F``,
``from torch.utils.data import DataLoader``), so ``nn.Linear``, ``F.relu`` and a bare
``DataLoader`` all count as their full names (``torch.nn.Linear``...). An attribute whose
base is not a torch module (``x.view``, ``loss.backward``) counts as a use of that
attribute name, which is how `Tensor` methods are counted: a name shared with other
objects (``model.train``) is counted too, so those counts are upper bounds.
"""
from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path


def count_uses(folder: Path) -> tuple[Counter, Counter]:
    """(uses by full torch name, uses of attribute names on non-module values) over every .py file."""
    qualified: Counter = Counter()
    attributes: Counter = Counter()
    for path in sorted(Path(folder).rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        _count_file(tree, qualified, attributes)
    return qualified, attributes


def _count_file(tree: ast.AST, qualified: Counter, attributes: Counter) -> None:
    aliases: dict[str, str] = {}  # local name -> what it stands for ("nn" -> "torch.nn")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "torch":
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "torch"
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            full = _dotted(node, aliases)
            if full is not None:
                qualified[full] += 1
            else:
                attributes[node.attr] += 1
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in aliases:
            qualified[aliases[node.id]] += 1


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """``nn.functional.relu`` -> "torch.nn.functional.relu" when its root is a torch alias, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])
