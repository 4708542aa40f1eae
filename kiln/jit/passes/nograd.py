"""NoGradStrip: for inference plans, drop gradient bookkeeping."""
from __future__ import annotations

from ..ir import Graph


class NoGradStrip:
    """Mark no value as needing gradients and remove stop_gradient identities."""

    name = "NoGradStrip"

    def __call__(self, graph: Graph) -> Graph:
        out = graph.copy()
        out.requires_grad = set()
        for node in [n for n in out.nodes if n.prim.name == "stop_gradient"]:
            out.replace_all_uses(node.out, node.inputs[0])
        out.nodes = [n for n in out.nodes if n.prim.name != "stop_gradient"]
        return out
