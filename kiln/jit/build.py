"""From a traced graph to a cache entry: differentiate, run the passes, lower, and say what happened.

`build_entry` is a pure function of its inputs: the trace of one call, the user's
extra passes and the backend's lowering. It returns the entry to cache, the pass
log (for ``explain()`` and KILN_DEBUG) and the text ``explain()`` shows for it.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from .. import autograd
from ..tensor import DataEpoch, Tensor
from .autodiff import differentiate
from .backends.cpu.background import background_builds
from .rematerialize import recompute_residuals
from .executor import InferenceEntry, OutputLayout, TrainingEntry
from .output_alias import Source, find_aliases, source_of_spec
from .passes import PassLog, inference_pipeline, logging_passes, run_pass, training_pipeline
from .symbolic import unique_guards
from .step_replay import grad_owner
from .trace import Trace, element_strides


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
    binding = traced.tracer.step_binding
    user_tensors = [out_leaves[pos] for pos in positions]
    layout = OutputLayout(traced.out_treedef, positions, statics,
                          find_aliases(user_tensors, alias_sources(traced), graph, alias_roots(graph, binding)))
    device = out_leaves[positions[0]].device if positions else None
    log = PassLog()
    backward_log = None
    shape_guards = list(traced.tracer.shape_guards)
    user_outputs = graph.outputs[:binding.n_user] if binding is not None else graph.outputs
    # a step that ran backward inside needs no compiled backward: its outputs come back detached
    training = autograd.is_grad_enabled() and any(v.id in graph.requires_grad for v in user_outputs) and \
        not (binding is not None and binding.backward_ran)
    if training:
        diff = recompute_residuals(differentiate(graph, traced.tracer.real, traced.tracer.symbolic),
                                   traced.tracer.real)
        backward_log = PassLog()
        with logging_passes(log):
            forward = run_pass(training_pipeline(passes), diff.forward)
        with logging_passes(backward_log):
            backward = run_pass(training_pipeline(passes), diff.backward)
        requires = [v.id in graph.requires_grad for v in graph.outputs]
        forward.observed_strides = traced_strides(forward, traced.tracer.strides)
        backward.observed_strides = {**diff.backward_strides, **observed_strides(backward, diff.backward_real)}
        on_cpu = backend == "cpu" and all(getattr(v.device, "type", "cpu") == "cpu" for v in forward.inputs)
        waits_for_compiler = on_cpu and not background_builds()  # (else the compiler runs in a worker thread)
        try:
            forward_plan, backward_plan = _lower_both(lower, forward, backward, concurrently=waits_for_compiler)
        finally:
            forward.observed_strides = backward.observed_strides = None
        entry: Any = TrainingEntry(forward, forward_plan, backward, backward_plan, diff.n_outputs,
                                   diff.cotangent_outputs, diff.grad_inputs, requires, layout, device, binding)
        shape_guards += diff.shape_guards
    else:
        branches = traced.tracer.branches
        if branches:  # the plan returns each branch value after the user's outputs (branches.py)
            graph = graph.copy()
            graph.outputs.extend(value for value, _, _ in branches)
        with logging_passes(log):
            forward = run_pass(inference_pipeline(passes), graph)
        forward.observed_strides = traced_strides(forward, traced.tracer.strides)
        try:
            plan = lower(forward)
        finally:
            forward.observed_strides = None
        entry = InferenceEntry(forward, plan, layout, device, binding)
        entry.branches = tuple(truth for _, truth, _ in branches)
    entry.shape_guards = unique_guards(shape_guards)
    entry.value_guards = tuple(traced.tracer.concretized)
    entry.data_epoch = DataEpoch.value  # held tensors are re-checked when some tensor gets another array
    entry.captured = tuple((spec.ref, spec.ref.requires_grad) for spec in graph.specs if spec.kind == "captured")
    article = "an" if entry.kind[0] in "aeiou" else "a"
    plan = getattr(entry, "plan", None) or getattr(entry, "forward_plan", None)
    if str(getattr(plan, "backend", "")).startswith("cuda"):  # backend="auto" lowered the GPU inputs for CUDA
        backend = plan.backend
    summary = (f"  compiled {article} {entry.kind} plan ({backend}): {len(graph.nodes)} traced nodes -> "
               f"{len(entry.graph.nodes)} forward nodes\n  forward passes:\n{log}")
    if training:
        summary += (f"\n  backward passes ({len(diff.backward.nodes)} -> {len(entry.backward_graph.nodes)} "
                    f"nodes):\n{backward_log}")
    return Built(entry, log, backward_log, summary)


def traced_strides(graph: Any, strides: dict) -> dict[int, tuple[int, ...]]:
    """Value id -> element strides of each node result of `graph` whose array, when the trace made it, was a
    NumPy array that is not C-contiguous (`strides`: the tracer's record of them), as `observed_strides` below."""
    return {node.out.id: strides[node.out.id] for node in graph.nodes if node.out.id in strides}


def observed_strides(graph: Any, real: dict) -> dict[int, tuple[int, ...]]:
    """Value id -> element strides of each node result, and of each residual input of a backward graph,
    that the trace saw as a NumPy array that is not C-contiguous (a crop of a padded fold, a transposed
    weight): the layout a replay will most likely give it too, so generated code can expect it from
    the first replay on."""
    strides = {}
    residuals = [v for v, spec in zip(graph.inputs, graph.specs) if spec.kind == "residual"]
    for value in residuals + [node.out for node in graph.nodes]:
        found = element_strides(getattr(real.get(value.id), "_data", None), value.shape)
        if found is not None:
            strides[value.id] = found
    return strides


def _lower_both(lower: Callable, forward: Any, backward: Any, concurrently: bool) -> tuple[Any, Any]:
    """`lower` of the forward and the backward graph; `concurrently` (the CPU backend), the backward's
    in a second thread: that backend spends most of it waiting for the C compiler, so the two
    compilers run side by side. (A GPU backend's driver calls stay on the calling thread.)"""
    if not concurrently:
        return lower(forward), lower(backward)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kiln-lower") as pool:
        backward_plan = pool.submit(lower, backward)
        forward_plan = lower(forward)
        return forward_plan, backward_plan.result()


def alias_sources(traced: Trace) -> list[tuple[Source, Tensor]]:
    """The tensors a returned tensor may be (or view) that live outside the plan, as they are at
    the end of the trace: arguments, parameters, buffers and captured tensors, and the optimizer
    state and ``.grad`` s a whole step reads or sets."""
    sources = [(Source("arg", index), traced.in_leaves[index]) for index in traced.leaf_of_tensor.values()]
    for spec in traced.graph.specs:
        if spec.kind in ("param", "buffer", "captured"):
            sources.append((Source("tensor", spec.ref), spec.ref))
    binding = traced.tracer.step_binding
    if binding is not None:
        for optimizer, _ in binding.optimizers:
            for param, entries in optimizer.state.items():
                for key, value in entries.items():
                    if isinstance(value, Tensor):
                        sources.append((Source("optstate", (optimizer, param, key)), value))
        targets = [target for target, _ in binding.grad_sets] + [target for target, _ in binding.grad_guards]
        for target in dict.fromkeys(targets):
            grad = grad_owner(target, traced.in_leaves)._grad
            if grad is not None:
                sources.append((Source("grad", target), grad))
    return sources


def alias_roots(graph: Any, binding: Any) -> dict[int, Source]:
    """Graph value id -> the source whose live tensor holds that value after a replay: the
    inputs, the values written back into state, and the grads and state a whole step sets."""
    roots: dict[int, Source] = {}
    for value, spec in zip(graph.inputs, graph.specs):
        source = source_of_spec(spec.kind, spec.ref)
        if source is not None:
            roots[value.id] = source
    for write in graph.state_writes:
        source = source_of_spec(write.kind, write.ref)
        if source is not None:
            roots[write.value.id] = source
    if binding is not None:
        extra = graph.outputs[binding.n_user:]
        for target, index in binding.grad_sets:
            if index is not None:
                roots[extra[index].id] = Source("grad", target)
        for path, index, _ in binding.state_sets:
            roots[extra[index].id] = Source("optstate", path)
    return roots
