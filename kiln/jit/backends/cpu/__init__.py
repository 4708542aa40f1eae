"""The CPU backend: the interpreter's Plan with elementwise chains fused into generated C.

`lower(graph)` finds fusion groups (see fusion.py), compiles one C loop per group with
the system compiler (toolchain.py, cached on disk) and replaces each group by a single
node. Without a working compiler (none, failing, silent, misconfigured or hanging) it
warns once and lowers exactly like `interpret`.
"""
from __future__ import annotations

import warnings

from ...ir import Graph, Node
from ..interpret import Plan
from .codegen import FusedElementwise
from .fusion import find_groups
from . import toolchain
from .toolchain import CompilerUnavailable

_warned = False  # the fallback warning is given once per process


def _reset_state() -> None:
    """Forget the fallback warning and the toolchain's per-process state (for tests)."""
    global _warned
    _warned = False
    toolchain._reset_state()


def fuse(graph: Graph) -> Graph:
    """A copy of `graph` with each fusion group replaced by one FusedElementwise node."""
    groups = find_groups(graph)
    if not groups:
        return graph
    fused_at: dict[int, Node] = {}
    members: set[int] = set()
    for group in groups:
        fused_at[id(group.root)] = Node(FusedElementwise(group), group.inputs, {}, group.root.out)
        members.update(id(n) for n in group.nodes)
    out = graph.copy()
    out.nodes = [fused_at.get(id(n), n) for n in graph.nodes if id(n) not in members or id(n) in fused_at]
    return out


def available() -> bool:
    """Whether a C compiler actually builds libraries here (probed once per process)."""
    return toolchain.compiler_problem() is None


def lower(graph: Graph) -> Plan:
    """graph -> Plan with fused C kernels (falls back to the interpreter without a compiler)."""
    global _warned
    try:
        plan = Plan(fuse(graph))
    except CompilerUnavailable as exc:
        if not _warned:
            _warned = True
            warnings.warn(f"kiln: the CPU code generator is unavailable ({exc}); using the NumPy "
                          "interpreter instead", RuntimeWarning, stacklevel=2)
        plan = Plan(graph)
    plan.backend = "cpu"
    return plan
