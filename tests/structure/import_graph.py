"""kiln's import graph, read from the source: which module imports which, and its cycles.

Every import that runs counts, at module level or inside a function (a deferred import hides a
cycle from Python's loader, not from the design). Imports under ``if TYPE_CHECKING:`` never run and
serve annotations only: they are left out. ``from package import name`` is an edge to the module
``package.name`` where that is a module, else to ``package`` itself.
"""
from __future__ import annotations

import ast
from pathlib import Path


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the package folder `root`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of ``from {'.' * level}{name} import ...`` written in `module`."""
    base = module.split(".")
    if not is_package:
        base.pop()
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """`name`, or its closest enclosing package, among `modules` (None outside them)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking(node: ast.AST) -> bool:
    """Whether `node` is ``if TYPE_CHECKING:`` (or ``if typing.TYPE_CHECKING:``)."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _running_nodes(tree: ast.AST):
    """Every node of `tree` except the bodies of ``if TYPE_CHECKING:`` blocks (their else branches stay)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if _type_checking(node):
            todo.extend(node.orelse)
            todo.append(node.test)
        else:
            todo.extend(ast.iter_child_nodes(node))


def import_edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of `modules` it imports (itself excluded)."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in _running_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, path.name == "__init__.py", node.level, node.module) if node.level \
                    else node.module
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            else:
                continue
            for target in targets:
                known = _known(target, modules)
                if known is not None and known != module:
                    edges[module].add(known)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def cycle_path(edges: dict[str, set[str]], component: frozenset[str]) -> list[str]:
    """One import loop inside `component`, as a list of modules that starts and ends at the same one."""
    start = min(component)
    parents = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(edges[node] & component):
            if child == start:
                path = [node]
                while parents[path[-1]] is not None:
                    path.append(parents[path[-1]])
                return [*reversed(path), start]  # start ... node, then back to start
            if child not in parents:
                parents[child] = node
                queue.append(child)
    return [start]
