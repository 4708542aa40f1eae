"""NoGradStrip: for inference plans, drop gradient bookkeeping."""
from __future__ import annotations

from ..ir import Graph, Node


def _no_op(node: Node) -> bool:
    """An identity that keeps its input's shape (stop_gradient, what detach() traces to; a reshape to the same
    shape): without gradients it only renames its input."""
    return node.prim.identity and len(node.inputs) == 1 and tuple(node.out.shape) == tuple(node.inputs[0].shape)


class NoGradStrip:
    """Mark no value as needing gradients and remove identities that change nothing (stop_gradient)."""

    name = "NoGradStrip"

    def __call__(self, graph: Graph) -> Graph:
        out = graph.copy()
        out.requires_grad = set()
        dropped = [n for n in out.nodes if _no_op(n)]
        for node in dropped:
            out.replace_all_uses(node.out, node.inputs[0])
        gone = {id(n) for n in dropped}
        out.nodes = [n for n in out.nodes if id(n) not in gone]
        return out
