"""From a traced graph to a cache entry: differentiate, run the passes, lower, and say what happened.

`build_entry` is a pure function of its inputs: the trace of one call, the user's
extra passes and the backend's lowering. It returns the entry to cache, the pass
log (for ``explain()`` and KILN_DEBUG) and the text ``explain()`` shows for it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .. import autograd
from ..tensor import Tensor
from .autodiff import differentiate
from .executor import InferenceEntry, OutputLayout, TrainingEntry
from .passes import PassLog, inference_pipeline, logging_passes, run_pass, training_pipeline
from .symbolic import unique_guards
from .trace import Trace


@dataclass
class Built:
    """A compiled entry, the pass logs of its forward (and backward) graph, and its explain() text."""

    entry: Any
    log: PassLog
    backward_log: PassLog | None
    summary: str


def build_entry(traced: Trace, *, passes: list, lower: Callable, backend: str) -> Built:
    """Differentiate (if outputs need gradients and grad mode is on), optimize and lower a trace."""
    graph = traced.graph
    out_leaves = traced.out_leaves
    positions = [i for i, x in enumerate(out_leaves) if isinstance(x, Tensor)]
    statics = {i: x for i, x in enumerate(out_leaves) if not isinstance(x, Tensor)}
    arg_alias = {k: traced.leaf_of_tensor[id(out_leaves[pos])] for k, pos in enumerate(positions)
                 if id(out_leaves[pos]) in traced.leaf_of_tensor}
    layout = OutputLayout(traced.out_treedef, positions, statics, arg_alias)
    device = out_leaves[positions[0]].device if positions else None
    log = PassLog()
    backward_log = None
    shape_guards = list(traced.tracer.shape_guards)
    binding = traced.tracer.step_binding
    user_outputs = graph.outputs[:binding.n_user] if binding is not None else graph.outputs
    # a step that ran backward inside needs no compiled backward: its outputs come back detached
    training = autograd.is_grad_enabled() and any(v.id in graph.requires_grad for v in user_outputs) and \
        not (binding is not None and binding.backward_ran)
    if training:
        diff = differentiate(graph, traced.tracer.real, traced.tracer.symbolic)
        backward_log = PassLog()
        with logging_passes(log):
            forward = run_pass(training_pipeline(passes), diff.forward)
        with logging_passes(backward_log):
            backward = run_pass(training_pipeline(passes), diff.backward)
        requires = [v.id in graph.requires_grad for v in graph.outputs]
        entry: Any = TrainingEntry(forward, lower(forward), backward, lower(backward), diff.n_outputs,
                                   diff.cotangent_outputs, diff.grad_inputs, requires, layout, device, binding)
        shape_guards += diff.shape_guards
    else:
        with logging_passes(log):
            forward = run_pass(inference_pipeline(passes), graph)
        entry = InferenceEntry(forward, lower(forward), layout, device, binding)
    entry.shape_guards = unique_guards(shape_guards)
    entry.value_guards = tuple(traced.tracer.concretized)
    entry.captured = tuple((spec.ref, spec.ref.requires_grad) for spec in graph.specs if spec.kind == "captured")
    article = "an" if entry.kind[0] in "aeiou" else "a"
    summary = (f"  compiled {article} {entry.kind} plan ({backend}): {len(graph.nodes)} traced nodes -> "
               f"{len(entry.graph.nodes)} forward nodes\n  forward passes:\n{log}")
    if training:
        summary += (f"\n  backward passes ({len(diff.backward.nodes)} -> {len(entry.backward_graph.nodes)} "
                    f"nodes):\n{backward_log}")
    return Built(entry, log, backward_log, summary)
