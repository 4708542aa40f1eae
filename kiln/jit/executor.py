"""Running compiled plans: gather inputs, execute, write state back, hook into autograd.

An inference entry runs one plan. A training entry runs the forward plan, keeps
its residuals, and hooks the outputs into autograd through one node per call
(`CompiledCallBackward`, whose VJP runs the backward plan once for all outputs);
`loss.backward()` then fills ``.grad`` exactly as eager does, including through
eager code around the compiled call.

Each output's ``grad_fn`` is a `CompiledFunctionBackward` node, named as PyTorch names
the grad_fn of ``torch.compile`` outputs; it routes that output's gradient into the
call's node (kiln's engine gives every node one output, so the outputs of one call have
distinct grad_fns that share one `call`; ``grad_fn.output_nr`` tells them apart, as
``Tensor.output_nr`` does in PyTorch, where the outputs share one grad_fn).
"""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from .. import autograd
from ..autograd import Node
from ..ops.primitive import Primitive
from ..tensor import Tensor
from . import state_locks
from .branches import WRONG_PATH, took_the_same_path
from .ir import Graph, InputSpec
from .output_alias import OutputAliases
from .pytree import TreeDef, unflatten
from .step_replay import StepBinding, grad_owner, state_entry, write_target
from .step_replay import memory_owner as _owner
from .symbolic import resolve, resolve_output_statics


def gather_inputs(specs: list[InputSpec], leaves: list, extra: dict[str, list] | None = None,
                  dims: dict[str, int] | None = None, env: list | None = None) -> list:
    """The arrays for each graph input on this call (fresh params, fresh random keys).

    `dims` (dynamic_dims sizes of this call) sizes the random draws whose count is symbolic;
    `env` holds this call's hyperparameter values (see kiln.jit.hyper) for the "hyper" inputs.
    """
    arrays = []
    for spec in specs:
        kind = spec.kind
        if kind == "arg":
            arrays.append(leaves[spec.ref]._data)
        elif kind in ("param", "buffer", "captured"):
            arrays.append(spec.ref._data)
        elif kind == "literal":
            arrays.append(spec.literal)
        elif kind == "rng":
            generator, count = spec.ref
            seed, offset = generator.take(resolve(count, dims) if dims is not None else count)
            arrays.append(np.array([seed, offset], dtype=np.int64))
        elif kind == "hyper":
            arrays.append(spec.ref.array(env))
        elif kind == "optstate":
            arrays.append(state_entry(spec.ref)._data)
        elif kind == "grad":
            arrays.append(grad_owner(spec.ref, leaves)._grad._data)
        else:  # residual / cotangent: supplied by the caller
            arrays.append(extra[kind][spec.ref])  # type: ignore[index]
    return arrays


def write_state(graph: Graph, values: list, leaves: list) -> None:
    """Copy state-write results into their targets (buffers, captured tensors, arguments,
    optimizer state, grads left by an earlier backward); a result that is the target's own
    array was written in place by the plan."""
    for write, value in zip(graph.state_writes, values):
        target = write_target(write.kind, write.ref, leaves)
        if value is not target._data:
            target._device.xp.copyto(target._data, value, casting="unsafe")
        target._bump_version()


class OutputLayout:
    """How to rebuild the user's output pytree from plan outputs and static leaves."""

    def __init__(self, treedef: TreeDef, tensor_slots: list[int], statics: dict[int, Any],
                 aliases: OutputAliases):
        self.treedef = treedef
        self.tensor_slots = tensor_slots  # leaf position of each tensor output, in graph output order
        self.statics = statics  # leaf position -> non-tensor value
        self.aliases = aliases  # outputs that are (or view) inputs, state or other outputs, as in eager
        self.single = treedef.kind == "leaf" and len(tensor_slots) == 1

    def build(self, tensors: list[Tensor], leaves: list, dims: dict | None = None) -> Any:
        if self.aliases:
            tensors = self.aliases.apply(tensors, leaves, dims)
        tensors = self.aliases.separate(tensors)
        if self.single:  # the function returned one tensor
            return tensors[0]
        out: list[Any] = [None] * self.treedef.num_leaves
        statics = self.statics if dims is None else resolve_output_statics(self.statics, dims)
        for pos, value in statics.items():  # a returned size (dynamic_dims) is this call's
            out[pos] = value
        for pos, t in zip(self.tensor_slots, tensors):
            out[pos] = t
        return unflatten(self.treedef, out)


def _wrap(array: Any, like_device: Any) -> Tensor:
    if type(array) is not np.ndarray and getattr(like_device, "type", "cpu") == "cpu":  # a GPU plan's stay CuPy
        array = np.asarray(array)
    return Tensor._wrap(array, like_device)


class InferenceEntry:
    """A cached inference plan, or a whole training step (backward and optimizer inside).

    A `StepBinding` (whole steps, see step_replay.py) fills the hyperparameter inputs and,
    after the plan ran, sets ``.grad`` and new optimizer state from the outputs after the user's.
    """

    kind = "inference"
    branches: tuple[bool, ...] = ()  # the truth of each branch the trace took (branches.py)

    def __init__(self, graph: Graph, plan: Any, layout: OutputLayout, device: Any,
                 binding: StepBinding | None = None):
        self.graph = graph
        self.plan = plan
        self.layout = layout
        self.device = device
        self.binding = binding
        self.paths: list[InferenceEntry] = [self]  # with branches: the plans of each path met, shared
        self._locks = state_locks.ReplayLocks(graph, binding)
        if binding is not None and binding.backward_ran:
            self.kind = "training step"

    def run(self, leaves: list, dims: dict | None) -> Any:
        binding = self.binding
        if binding is None:
            if not self.graph.state_writes:
                outs, _ = self.plan.run(gather_inputs(self.graph.specs, leaves, dims=dims), dims)
                if self.branches:
                    if not took_the_same_path(outs, self.branches):
                        return WRONG_PATH
                    outs = outs[:len(outs) - len(self.branches)]
                return self.layout.build([_wrap(o, self.device) for o in outs], leaves, dims)
            with self._locks.hold(leaves):
                outs, writes = self.plan.run(gather_inputs(self.graph.specs, leaves, dims=dims), dims)
                write_state(self.graph, writes, leaves)
            return self.layout.build([_wrap(o, self.device) for o in outs], leaves, dims)
        with self._locks.hold(leaves):
            inputs = gather_inputs(self.graph.specs, leaves, dims=dims, env=binding.env() if binding.sources else None)
            outs, writes = self.plan.run(inputs, dims)
            write_state(self.graph, writes, leaves)
            n = binding.n_user
            user = [_wrap(o, self.device) for o in outs[:n]]
            binding.apply(outs[n:], leaves, {id(_owner(a)) for a in (*inputs, *writes, *outs[:n])})
        return self.layout.build(user, leaves, dims)


class _GradBundle(dict):
    """Cotangents of a compiled call's outputs, keyed by output index; `+` merges them."""

    def __add__(self, other: "_GradBundle") -> "_GradBundle":
        merged = _GradBundle(self)
        for k, g in other.items():
            merged[k] = merged[k] + g if k in merged else g
        return merged


class _OutputSelect(Primitive):
    """Routes the gradient of output i of a compiled call into its bundle."""

    # its input is the call's tensor, which holds the residuals: the outputs' nodes keep it alive
    saves_inputs = (0,)

    def __init__(self) -> None:
        self.name = "compiled_output"

    def vjp(self, g, inputs, node, *, index):
        return (_GradBundle({index: g}),)


class _CompiledBackward(Primitive):
    """The autograd node of one compiled call: its VJP runs the backward plan."""

    def __init__(self) -> None:
        self.name = "compiled_call"

    def vjp(self, bundle, inputs, node, *, entry):
        # the residuals live on the node's output (see TrainingEntry._attach), so that they are
        # freed with the graph after a backward without retain_graph, as eager's saved tensors are
        return entry.backward(bundle, node.output()._compiled_saved)


class _NoDoubleBackward(Primitive):
    """The grad_fn of gradients a compiled backward made under create_graph=True.

    The backward plan computes on arrays, so it records no graph of its own; these grads
    require grad (as eager's do) and raise if something differentiates through them, instead
    of silently contributing nothing (a gradient penalty would lose its term).
    """

    def __init__(self) -> None:
        self.name = "compiled_call_backward"

    def vjp(self, g, inputs, node):
        raise RuntimeError("differentiating through the gradient of a compiled function (double backward, "
                           "e.g. a gradient penalty) is not supported: its backward plan records no graph. "
                           "Fix: compute this loss with the uncompiled function.")


_SELECT = _OutputSelect()
_BACKWARD = _CompiledBackward()
_NO_DOUBLE = _NoDoubleBackward()


class CompiledFunctionBackward(Node):
    """The ``grad_fn`` of each output of a compiled training call (PyTorch's name for it).

    ``repr`` reads ``<CompiledFunctionBackward>`` and ``name()`` ``"CompiledFunctionBackward"``,
    in the style of kiln's eager nodes (``<MulBackward>``). `output_nr` says which output of the
    call this is; `call` is the node shared by all outputs of the call, whose inputs are the
    tensors the call differentiates.
    """

    __slots__ = ()

    def name(self) -> str:
        return "CompiledFunctionBackward"

    @property
    def output_nr(self) -> int:
        """The index of this output among the call's tensor outputs (as PyTorch's Tensor.output_nr)."""
        return self.params["index"]

    @property
    def call(self) -> "CompiledCallBackward":
        """The node that runs the call's backward plan (``edges[0]``)."""
        return self.edges[0]


class CompiledCallBackward(Node):
    """The one node of a compiled call: gathers its outputs' gradients and runs the backward plan."""

    __slots__ = ()

    def name(self) -> str:
        return "CompiledFunctionCallBackward"


class CompiledFunctionBackwardBackward(Node):
    """The ``grad_fn`` of gradients a compiled backward made under ``create_graph=True`` (PyTorch's name)."""

    __slots__ = ()

    def name(self) -> str:
        return "CompiledFunctionBackwardBackward"


def _raise_modified(t: Tensor, version: int, what: str) -> None:
    raise RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: [{t.dtype.name} tensor of shape {tuple(t.shape)}]{what} is at version {t._version}; "
        f"expected version {version} instead (needed by a compiled call's backward). Fix: use the "
        "out-of-place op, or .clone() the tensor before modifying it.")


class TrainingEntry:
    """Cached forward and backward plans for a call that needs gradients."""

    kind = "training"

    def __init__(self, forward: Graph, forward_plan: Any, backward: Graph, backward_plan: Any,
                 n_outputs: int, cotangent_outputs: list[int], grad_inputs: list[int],
                 output_requires_grad: list[bool], layout: OutputLayout, device: Any,
                 binding: StepBinding | None = None):
        self.graph = forward
        self.forward_plan = forward_plan
        self.backward_graph = backward
        self.backward_plan = backward_plan
        self.n_outputs = n_outputs
        self.cotangent_outputs = cotangent_outputs
        self.grad_inputs = grad_inputs
        self.output_requires_grad = output_requires_grad
        self.layout = layout
        self.device = device
        self.binding = binding
        self._locks = state_locks.ReplayLocks(forward, binding)
        self._out_shapes: list[tuple] = []

    def run(self, leaves: list, dims: dict | None) -> Any:
        """Run the forward plan on this call's inputs; the outputs get the call's autograd node."""
        binding = self.binding
        with self._locks.hold(leaves):
            env = binding.env() if binding is not None and binding.sources else None
            inputs = gather_inputs(self.graph.specs, leaves, dims=dims, env=env)
            outs, writes = self.forward_plan.run(inputs, dims)
            residuals = outs[self.n_outputs:]
            saved = self._saved_inputs(residuals, inputs, leaves) if residuals else ()
            if self.graph.state_writes and saved:
                residuals = self._copy_written(residuals, saved, leaves)
            write_state(self.graph, writes, leaves)
            n_user = binding.n_user if binding is not None else self.n_outputs
            user = [_wrap(o, self.device) for o in outs[:n_user]]
            if binding is not None:  # grads and optimizer state the function set (no backward inside)
                binding.apply(outs[n_user:self.n_outputs], leaves,
                              {id(_owner(a)) for a in (*inputs, *writes, *outs[:n_user], *residuals)})
        if autograd.is_grad_enabled():
            diff_inputs = tuple(self._input_tensor(i, leaves) for i in self.grad_inputs)
            # no differentiable path (e.g. only floor_divide): the outputs still require grad, as in eager
            if not diff_inputs or any(t.requires_grad for t in diff_inputs):
                saved = tuple((t, t._version, j) for t, j in saved)
                kept = self._saved_outputs(residuals, user) if residuals else ()
                self._attach(user, diff_inputs, (residuals, saved, kept), dims)
        return self.layout.build(user, leaves, dims)

    def _saved_inputs(self, residuals: list, inputs: list, leaves: list) -> list:
        """(input tensor, residual index) for residuals that share an input's memory (the input itself or
        a view of it): changing that input before backward would change the gradient, so it is checked."""
        owners: dict[int, int] | None = None
        found = []
        for j, r in enumerate(residuals):
            owner = _owner(r)
            if owners is None:
                owners = {}
                for i, a in enumerate(inputs):
                    owners.setdefault(id(_owner(a)), i)
            i = owners.get(id(owner))
            if i is not None and self.graph.specs[i].kind in ("arg", "param", "buffer", "captured"):
                found.append((self._input_tensor(i, leaves), j))
        return found

    def _saved_outputs(self, residuals: list, user: list[Tensor]) -> tuple:
        """(weak ref, output index, version) of the outputs that share memory with a residual.

        ``y = f(x)`` where the backward reads y itself (exp, tanh, sigmoid, ...): an in-place
        update of y before backward would silently change the gradient, so it is checked, as
        eager checks the output it saves. Outputs that *are* arguments are checked as inputs.
        """
        owners = {id(_owner(r)) for r in residuals}
        return tuple((weakref.ref(t), i, t._version) for i, t in enumerate(user)
                     if i not in self.layout.aliases.by_identity and id(_owner(t._data)) in owners)

    def _copy_written(self, residuals: list, saved: list, leaves: list) -> list:
        """Residuals that alias an input this call writes back to keep the value the forward used."""
        targets = {id(write_target(w.kind, w.ref, leaves)) for w in self.graph.state_writes}
        residuals = list(residuals)
        for t, j in saved:
            if id(t) in targets:
                residuals[j] = residuals[j].copy()
        return residuals

    def _input_tensor(self, index: int, leaves: list) -> Tensor:
        spec = self.graph.specs[index]
        return leaves[spec.ref] if spec.kind == "arg" else spec.ref

    def _attach(self, user: list[Tensor], diff_inputs: tuple, residuals: tuple, dims: dict | None) -> None:
        """Give the outputs that require grad a `CompiledFunctionBackward` node each, all leading
        into one `CompiledCallBackward` node over `diff_inputs`.

        That node's output (`packed`, a 0-d placeholder) holds the residuals: only the outputs'
        nodes reference it, through their inputs, which the engine drops after a backward
        without retain_graph, so the residuals are freed then, not when the outputs die.
        """
        packed = Tensor._wrap(np.zeros(()), self.device)
        packed.requires_grad = True
        packed._compiled_saved = (residuals, dims, [t.shape for t in user])
        packed._node = CompiledCallBackward(_BACKWARD, diff_inputs, {"entry": self}, packed)
        for i, t in enumerate(user):
            if self.output_requires_grad[i]:
                t.requires_grad = True
                t._node = CompiledFunctionBackward(_SELECT, (packed,), {"index": i}, t)

    def backward(self, bundle: _GradBundle, residuals: tuple) -> tuple:
        """Run the backward plan on the outputs' cotangents (zeros for outputs that got none)."""
        (arrays, saved, kept), dims, shapes = residuals
        for t, version, _ in saved:
            if t._version != version:
                _raise_modified(t, version, "")
        for ref, i, version in kept:
            t = ref()
            if t is not None and t._version != version:
                _raise_modified(t, version, f", which is output {i} of a compiled call,")
        cotangents = {}  # keyed by output index, as the backward graph's cotangent inputs are
        for i in self.cotangent_outputs:
            g = bundle.get(i)
            if g is None:
                cotangents[i] = np.zeros(shapes[i], dtype=self.graph.outputs[i].dtype.np)
            else:
                cotangents[i] = g._data
        inputs = gather_inputs(self.backward_graph.specs, [], {"residual": arrays, "cotangent": cotangents})
        grads, _ = self.backward_plan.run(inputs, dims)
        out = tuple(_wrap(g, self.device) for g in grads)
        if autograd.is_grad_enabled():  # create_graph=True: mark the grads as not differentiable further
            for t in out:
                if t._data.dtype.kind == "f":
                    t.requires_grad = True
                    t._node = CompiledFunctionBackwardBackward(_NO_DOUBLE, (), {}, t)
        return out


class FallbackEntry:
    """A call signature that runs eagerly (its trace hit data-dependent Python)."""

    kind = "fallback"

    def __init__(self, reason: str):
        self.reason = reason
        self.graph = None
