"""The compiler asks primitives for their capabilities, not their names, beyond a recorded allowance that only
shrinks (primitive_names_allowed.json).

Counted in the compiler's passes, backends and autodiff: comparisons of a primitive's name (``prim.name ==
"sum"``, ``name in ("gather", "scatter_add")``) and module-level sets or tuples of primitive names (capability
sets such as the old ``FUSIBLE``). What a primitive can do belongs on the primitive (`Primitive.fuses`,
`reduction`, `identity`, `indexed`, ...), so that adding one touches only its own file and the renderer's table
(tests/jit/test_adding_a_primitive.py). The renderer's spelling tables, keyed by name, are not counted.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

import kiln  # noqa: F401 - registers every primitive
from kiln.ops.primitive import REGISTRY

HERE = Path(__file__).parent
KILN = HERE.parents[1] / "kiln"
SCANNED = [KILN / "jit" / "backends", KILN / "jit" / "passes", KILN / "jit" / "autodiff.py"]
ALLOWANCE = HERE / "primitive_names_allowed.json"


def _names_in(node: ast.AST) -> set[str]:
    """The registered primitive names a string constant or a literal set/tuple/list of them holds."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & set(REGISTRY)
    if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
        return set().union(*[_names_in(e) for e in node.elts]) if node.elts else set()
    return set()


def _is_name_read(node: ast.AST) -> bool:
    """``<anything>.name`` or a variable called ``name`` (``name = node.prim.name``)."""
    return isinstance(node, ast.Attribute) and node.attr == "name" or isinstance(node, ast.Name) and node.id == "name"


def name_checks(source: str) -> list[int]:
    """Lines of `source` that compare a primitive's name or define a module-level set of primitive names."""
    tree = ast.parse(source)
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_name_read(s) for s in sides) and any(_names_in(s) for s in sides):
                lines.append(node.lineno)
    for stmt in tree.body:
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "frozenset" and value.args:
            value = value.args[0]
        if value is not None and len(_names_in(value)) >= 2:
            lines.append(stmt.lineno)
    return sorted(lines)


def _files() -> list[Path]:
    return sorted(p for root in SCANNED for p in ([root] if root.is_file() else root.rglob("*.py")))


def test_the_scan_finds_name_checks_and_capability_sets() -> None:
    source = '''
FUSIBLE = {"add", "mul"}
SPELLING = {"add": "+"}
def f(node, lvl):
    name = node.prim.name
    if name == "matmul" or node.prim.name in ("gather", "scatter_add"):
        return lvl == "full"
    return node.prim.reduction is not None
'''
    assert name_checks(source) == [2, 6, 6]  # (two checks on line 6)


def test_primitive_name_checks_do_not_grow() -> None:
    found = {str(p.relative_to(KILN.parent)): len(name_checks(p.read_text())) for p in _files()}
    found = {path: n for path, n in found.items() if n}
    allowed = json.loads(ALLOWANCE.read_text())
    grown = {path: (allowed.get(path, 0), n) for path, n in found.items() if n > allowed.get(path, 0)}
    assert not grown, ("new checks of primitive names in the compiler (allowed, found): "
                       f"{grown}; give the primitive a capability (kiln/ops/primitive.py) and ask that instead")
    shrunk = {path: (n, found.get(path, 0)) for path, n in allowed.items() if found.get(path, 0) < n}
    assert not shrunk, f"fewer name checks than {ALLOWANCE.name} records (allowed, found): {shrunk}; lower it"
