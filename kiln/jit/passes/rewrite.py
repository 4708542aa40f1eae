"""Declarative pattern rewriting: a `Pat` tree matches nodes by op and operand structure.

    rule = Rule(Pat("add", Pat.any("a"), Pat("mul", Pat.any("b"), Pat.literal(-1))),
                lambda m, b: b.emit("sub", m["a"], m["b"]))

`RewritePass(rules)` applies every rule at every node (tinygrad's UPat and luminal's
SelectGraph are the models). Replaced nodes are left for DeadNodeElim.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...ops.primitive import REGISTRY, AbstractValue
from ..ir import Graph, Node, Value, host_array


class Pat:
    """A pattern: an op name (or None for any value) with operand patterns and a capture name."""

    def __init__(self, op: str | None, *inputs: "Pat", name: str | None = None,
                 where: Callable[[Value, "Match"], bool] | None = None, commutative: bool = False):
        self.op = op
        self.inputs = inputs
        self.name = name
        self.where = where
        self.commutative = commutative

    @staticmethod
    def any(name: str | None = None) -> "Pat":
        """Any value, captured under `name`."""
        return Pat(None, name=name)

    @staticmethod
    def literal(value: float, name: str | None = None) -> "Pat":
        """A baked scalar literal equal to `value`."""
        return Pat(None, name=name, where=lambda v, m: m.literal(v) is not None and m.literal(v) == value)

    def match(self, v: Value, m: "Match") -> bool:
        if self.op is not None:
            node = m.producers.get(v.id)
            if node is None or node.prim.name != self.op or len(node.inputs) != len(self.inputs):
                return False
            orders = [node.inputs]
            if self.commutative and len(node.inputs) == 2:
                orders.append(node.inputs[::-1])
            for operands in orders:
                saved = dict(m.captures)
                if all(p.match(x, m) for p, x in zip(self.inputs, operands)):
                    break
                m.captures = saved
            else:
                return False
        if self.where is not None and not self.where(v, m):
            return False
        if self.name is not None:
            if self.name in m.captures and m.captures[self.name] is not v:
                return False
            m.captures[self.name] = v
        return True


class Match:
    """Captured values of one match, plus graph lookups for predicates."""

    def __init__(self, producers: dict[int, Node], literals: dict[int, Any]):
        self.producers = producers
        self.literals = literals
        self.captures: dict[str, Value] = {}

    def __getitem__(self, name: str) -> Value:
        return self.captures[name]

    def literal(self, v: Value) -> Any:
        lit = self.literals.get(v.id)
        if lit is None:
            return None
        arr = host_array(lit)
        return arr.item() if arr.size == 1 else None


class Builder:
    """Emits replacement nodes just before the node being rewritten."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def emit(self, op: str, *inputs: Value, **params: Any) -> Value:
        prim = REGISTRY[op]
        aval = prim.abstract(*[AbstractValue(v.shape, v.dtype) for v in inputs], **params)
        out = Value(aval.shape, aval.dtype, inputs[0].device if inputs else params.get("device", "cpu"))
        self.nodes.append(Node(prim, list(inputs), params, out))
        return out


class Rule:
    """pattern -> replacement. `build(match, builder)` returns the value that replaces the root."""

    def __init__(self, pattern: Pat, build: Callable[[Match, Builder], Value | None], name: str = "rule"):
        self.pattern = pattern
        self.build = build
        self.name = name


class RewritePass:
    """Apply rules at every node; the first rule whose pattern matches wins."""

    def __init__(self, rules: list[Rule], name: str = "Rewrite"):
        self.rules = rules
        self.name = name
        self.fired: dict[str, int] = {}  # rule name -> times fired, over every run
        self.last_fired: dict[str, int] = {}  # the same, for the latest run only

    def __call__(self, graph: Graph) -> Graph:
        out = graph.copy()
        literals = out.literal_values()
        inputs = out.input_ids()
        outputs = {v.id for v in out.outputs}
        claimed = set(outputs)  # values already handed to the user as an output
        producers: dict[int, Node] = {}
        rename: dict[int, Value] = {}
        new_nodes: list[Node] = []
        changed = False
        self.last_fired = {}
        for node in out.nodes:
            node.rename_inputs(rename)
            producers[node.out.id] = node
            replacement = None
            for rule in self.rules:
                m = Match(producers, literals)
                if rule.pattern.match(node.out, m):
                    b = Builder()
                    replacement = rule.build(m, b)
                    if replacement is not None:
                        if replacement.shape != node.out.shape or replacement.dtype is not node.out.dtype:
                            replacement = None  # a rule may never change a value's type
                            continue
                        if node.out.id in outputs and _shares_memory(replacement, producers, b.nodes,
                                                                       inputs | claimed):
                            # `return x + 0` must not return x's own memory (or another
                            # output's): eager gives a fresh tensor the user may mutate.
                            replacement = None
                            continue
                        if node.out.id in outputs:
                            claimed.add(replacement.id)
                        for n in b.nodes:
                            producers[n.out.id] = n
                        new_nodes.extend(b.nodes)
                        self.fired[rule.name] = self.fired.get(rule.name, 0) + 1
                        self.last_fired[rule.name] = self.last_fired.get(rule.name, 0) + 1
                        break
            if replacement is not None and replacement is not node.out:
                rename[node.out.id] = replacement
                changed = True
            new_nodes.append(node)
        if not changed:
            return graph
        out.nodes = new_nodes
        out.rename_uses(rename, requires_grad=True)  # outputs and state writes; nodes are renamed already
        return out


def _shares_memory(v: Value, producers: dict[int, Node], built: list[Node], taken: set[int]) -> bool:
    """Whether `v`, or a value it is a view of, is in `taken` (graph inputs, returned outputs)."""
    local = {n.out.id: n for n in built}
    while True:
        if v.id in taken:
            return True
        node = local.get(v.id) or producers.get(v.id)
        if node is None or not node.prim.is_view or not node.inputs:
            return False
        v = node.inputs[0]


def sub_rule() -> Rule:
    """The showcase rewrite rule: add(a, mul(b, -1)) -> sub(a, b)."""
    pattern = Pat("add", Pat.any("a"), Pat("mul", Pat.any("b"), Pat.literal(-1), commutative=True),
                  commutative=True)
    return Rule(pattern, lambda m, b: b.emit("sub", m["a"], m["b"]), name="add(a, mul(b, -1)) -> sub(a, b)")


class SubRewrite(RewritePass):
    """The seed-004 rewrite as a pass."""

    def __init__(self) -> None:
        super().__init__([sub_rule()], name="SubRewrite")
