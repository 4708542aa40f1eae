"""Reverse-mode autograd: grad mode, the tape node, and the backward engine.

Every differentiable primitive call made while grad mode is on creates one `Node`
holding the primitive, its input tensors (of intermediates its VJP does not read, only their
shapes: unread_inputs.py) and its static params. `backward` walks
the nodes in reverse topological order and calls each primitive's VJP, which is
written in kiln ops, so `create_graph=True` gives higher-order gradients for free.
A leaf's gradient is delivered (its hooks, ``.grad``, its post-accumulate hooks) as
soon as no node still to run can add to it, while the rest of backward goes on.
"""
from __future__ import annotations

import functools
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from . import late_bound
from .gradient_sum import GradientSum, PendingGradient
from .trace_state import trace_state
from .unread_inputs import kept_inputs

if TYPE_CHECKING:
    from .ops.primitive import Primitive
    from .tensor import Tensor


class _GradState(threading.local):
    enabled: bool = True
    inference: bool = False


_state = _GradState()


def is_grad_enabled() -> bool:
    """Whether operations are recorded for autograd in this thread."""
    return _state.enabled


def is_inference_mode_enabled() -> bool:
    """Whether this thread runs inside ``kiln.inference_mode()``.

    >>> with kiln.inference_mode():
    ...     kiln.is_inference_mode_enabled()
    True
    """
    return _state.inference


class _GradMode:
    """Base of no_grad/enable_grad/set_grad_enabled: a context manager and a decorator."""

    _value: bool = True

    def __enter__(self) -> None:
        self._prev = _state.enabled
        _state.enabled = self._value

    def __exit__(self, *exc: object) -> None:
        _state.enabled = self._prev

    def __call__(self, fn: Callable) -> Callable:
        mode_type, value = type(self), self._value

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            mode = mode_type.__new__(mode_type)
            mode._value = value
            with mode:
                return fn(*args, **kwargs)

        return wrapper


class _BareDecoratorMode(_GradMode):
    """Also usable without parentheses: ``@kiln.no_grad`` as well as ``@kiln.no_grad()``."""

    def __new__(cls, orig_func: Callable | None = None) -> Any:
        if orig_func is None:
            return super().__new__(cls)
        return cls()(orig_func)


class no_grad(_BareDecoratorMode):
    """Disable gradient recording: ``with kiln.no_grad(): ...`` or ``@kiln.no_grad()``."""

    _value = False


class enable_grad(_BareDecoratorMode):
    """Enable gradient recording inside a no_grad region."""

    _value = True


class set_grad_enabled(_GradMode):
    """Set grad mode to ``mode``, as a context manager, a decorator, or a plain call (as in PyTorch).

    >>> with kiln.set_grad_enabled(False): ...
    >>> kiln.set_grad_enabled(False)  # takes effect at once
    """

    def __init__(self, mode: bool):
        self._value = bool(mode)
        self._prev = _state.enabled
        _state.enabled = self._value

    def __enter__(self) -> None:
        _state.enabled = self._value

    def __call__(self, fn: Callable) -> Callable:
        _state.enabled = self._prev  # used as a decorator: the call itself changes nothing
        value = self._value

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_grad_enabled(value):
                return fn(*args, **kwargs)

        return wrapper


class inference_mode(_GradMode):
    """No gradient recording, for inference: ``with kiln.inference_mode(): ...`` or as a decorator.

    kiln records nothing under it, as under `no_grad` (a compiled function traced inside it
    is an inference plan, as under no_grad); `is_inference_mode_enabled` reports it.
    ``inference_mode(False)`` turns it, and grad mode, back on inside an outer one.

    >>> with kiln.inference_mode():
    ...     y = model(x)
    >>> @kiln.inference_mode()
    ... def predict(x): return model(x)
    """

    def __new__(cls, mode: Any = True) -> Any:
        if callable(mode):  # @kiln.inference_mode without parentheses
            return super().__new__(cls)(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool = True):
        if not isinstance(mode, int) and getattr(getattr(mode, "dtype", None), "kind", "") != "b":
            raise TypeError(f"inference_mode(mode) expects a bool, got {type(mode).__name__} ({mode!r}); "
                            "write kiln.inference_mode() or kiln.inference_mode(False)")
        self._value = bool(mode)

    def __enter__(self) -> None:
        self._prev = _state.enabled
        self._prev_inference = _state.inference
        _state.enabled = not self._value
        _state.inference = self._value

    def __exit__(self, *exc: object) -> None:
        _state.enabled = self._prev
        _state.inference = self._prev_inference

    def __call__(self, fn: Callable) -> Callable:
        value = self._value

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with inference_mode(value):
                return fn(*args, **kwargs)

        return wrapper

    def clone(self) -> inference_mode:
        """A new context manager with the same mode."""
        return inference_mode(self._value)


# Serializes every read-modify-write of a ``.grad`` done by the backward engine, as PyTorch's
# AccumulateGrad does under its lock: threads that share parameters and each call backward()
# would otherwise both read the old .grad, and one thread's update would be lost. Hooks and the
# VJPs run outside it, so threads still backpropagate concurrently; reentrant because a grad
# addition may be recorded by a tracer (kiln.jit) that is free to call back into autograd.
_accumulate_lock = threading.RLock()


def accumulate_grad(t: Tensor, g: Tensor, create_graph: bool, fresh: Callable[[Tensor], Tensor]) -> None:
    """``t.grad += g`` (a new tensor, never in place), safe against concurrent backward passes.

    `fresh(g)` gives the tensor to store when ``t.grad`` is None: a buffer no other ``.grad``
    shares. With `create_graph` the sum stays in the graph, for higher-order gradients.
    """
    with _accumulate_lock:
        _accumulate(t, g, create_graph, fresh)


def _accumulate(t: Tensor, g: Tensor, create_graph: bool, fresh: Callable[[Tensor], Tensor]) -> None:
    """`accumulate_grad` for a caller that holds `_accumulate_lock`."""
    prev = t.grad
    if prev is None:
        t.grad = g if create_graph else fresh(g)
    else:
        t.grad = prev + g if create_graph else (prev + g).detach()


class Node:
    """One recorded primitive call: the `grad_fn` of the tensor it produced."""

    __slots__ = ("prim", "inputs", "edges", "params", "versions", "out_ref", "out_version",
                 "hooks", "retain_ref", "recompute", "__weakref__")

    def __init__(self, prim: Primitive, inputs: tuple, params: dict, out: Tensor):
        self.prim = prim
        # where each input's gradient goes, fixed now (a later in-place op may give the input
        # tensor a new node): its node, None for a leaf that requires grad, False for no grad
        self.edges = tuple([t._node if t.requires_grad else False for t in inputs])
        # the inputs the VJP reads, and leaves; of the rest only their shapes (unread_inputs.py)
        saves = prim.saved_inputs(inputs) if prim.narrows_saves else prim.saves_inputs
        edges = self.edges  # (an input with a node is an intermediate, which kept_inputs may replace)
        self.inputs = kept_inputs(prim, inputs, saves) if len(saves) < len(inputs) and any(edges) else inputs
        self.params = params
        self.versions = tuple([(i, inputs[i]._version) for i in saves]) if saves else ()  # (input, version)
        self.out_ref = weakref.ref(out)
        self.out_version = out._version
        self.hooks: list[Callable] | None = None
        self.retain_ref: Any = None
        self.recompute: Callable[[Node], tuple] | None = None  # remakes inputs dropped after the forward

    def name(self) -> str:
        return f"{self.prim.name.capitalize()}Backward"

    def __repr__(self) -> str:
        return f"<{self.name()}>"

    def rebind_output(self, out: Tensor) -> None:
        """Point this node at `out` (used when an in-place op adopts the node)."""
        self.out_ref = weakref.ref(out)
        self.out_version = out._version

    def check_versions(self) -> None:
        if self.inputs is None:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Specify retain_graph=True on the "
                "first backward() call if you need to backward through the graph again."
            )
        for i, version in self.versions:
            t = self.inputs[i]
            if t._version != version:
                _raise_modified(self, t, version)
        if self.prim.saves_output:
            out = self.out_ref()
            if out is not None and out._version != self.out_version:
                _raise_modified(self, out, self.out_version)

    def output(self) -> Tensor:
        out = self.out_ref()
        if out is None:  # the output was only needed by the user, who dropped it
            raise RuntimeError(f"{self.name()}: its saved output was freed; keep a reference to it")
        return out


def recompute_saved_input(out: Tensor, index: int, make: Callable[[], Any], reads: Sequence[Tensor]) -> bool:
    """Drop the array of input `index` of the node that made `out` now, and make it again with
    `make()` when the backward pass reaches that node: a large intermediate that is cheap to
    remake (a convolution's window columns) then costs no memory between forward and backward.

    `reads` are the tensors `make` reads: changing one in place before the backward raises the
    error a saved input's change would. The remade array is freed again as soon as the node has
    run, unless the graph is retained (or built on, with create_graph). Does nothing (and returns
    False) when `out` has no node or the input is a leaf; the caller must hold no other reference
    to the input.
    """
    node = out._node
    if node is None or node.recompute is not None:
        return False
    t = node.inputs[index]
    if t._node is None and t.requires_grad:
        return False
    versions = tuple((r, r._version) for r in reads)

    def remake(node: Node) -> tuple:  # (given the node, not holding it: no reference cycle)
        for r, version in versions:
            if r._version != version:
                _raise_modified(node, r, version)
        node.recompute = None  # the input stays made for a retained graph's next pass
        t._data = make()
        return (t,)

    t._data = None
    node.recompute = remake
    return True


def _raise_modified(node: Node, t: Tensor, version: int) -> None:
    raise RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace "
        f"operation: [{t.dtype.name} tensor of shape {tuple(t.shape)}], which is output 0 of "
        f"{t.grad_fn.name() if t.grad_fn else 'a leaf'}, is at version {t._version}; expected "
        f"version {version} instead (needed by {node.name()}). Fix: use the out-of-place op, "
        "or .clone() the tensor before modifying it."
    )


def _toposort(roots: Sequence[Node]) -> list[Node]:
    """Nodes reachable from roots, each after every node that consumes its output."""
    order: list[Node] = []
    seen: set[int] = set()
    for root in roots:
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack: list[tuple[Node, int]] = [(root, 0)]
        while stack:
            node, i = stack.pop()
            edges = node.edges
            while i < len(edges):
                child = edges[i]
                i += 1
                if child and id(child) not in seen:
                    seen.add(id(child))
                    stack.append((node, i))
                    stack.append((child, 0))
                    break
            else:
                order.append(node)
    order.reverse()
    return order


def _leaf_edges(order: Sequence[Node]) -> tuple[dict[int, list[int]], dict[int, int]]:
    """For each node, the ids of the leaves it sends gradients to (one per edge); for each
    leaf, how many such edges the pass has (its gradient is final once they have all run)."""
    node_leaves: dict[int, list[int]] = {}
    waits: dict[int, int] = {}
    for node in order:
        inputs = node.inputs
        if inputs is None:
            continue
        keys = [id(inp) for inp, child in zip(inputs, node.edges) if child is None]
        if keys:
            node_leaves[id(node)] = keys
            for key in keys:
                waits[key] = waits.get(key, 0) + 1
    return node_leaves, waits


def run_post_accumulate_hooks(t: Tensor) -> None:
    """Call the hooks `t.register_post_accumulate_grad_hook` registered, after ``t.grad`` was updated."""
    hooks = t._post_accumulate_hooks
    if hooks:
        for hook in list(hooks):
            hook(t)


def _memory(data: Any) -> Any:
    """The array that owns `data`'s memory."""
    base = getattr(data, "base", None)
    return data if base is None else base


def _whole_view(data: Any, base: Any) -> bool:
    """Whether `data` is a C-ordered view of all of `base`'s memory (a reshaped or twice-transposed
    fresh result): it can then be handed out as a gradient as it is, with `base` counted as handed out."""
    # a C-contiguous view as large as its owner covers all of the owner's memory, from its start
    return (type(data) is type(base) and data.flags.c_contiguous and base.flags.owndata
            and data.nbytes == base.nbytes)


def run_backward(roots: Sequence[Tensor], grads: Sequence[Tensor], retain_graph: bool,
                 create_graph: bool, inputs: Sequence[Tensor] | None = None) -> list[Tensor | None] | None:
    """Backpropagate `grads` from `roots`. With `inputs`, return their grads instead of accumulating."""
    tracer = trace_state.tracer
    if tracer is not None:  # backward inside kiln.compile: the VJPs below are recorded as graph ops
        tracer.on_backward()
    pending: dict[int, GradientSum] = {}  # id(node) -> the gradients of its output so far
    leaf_pending: dict[int, tuple[Tensor, GradientSum]] = {}  # id(leaf) -> (leaf, its gradients)
    root_nodes: list[Node] = []
    leaf_results: dict[int, Tensor | None] = {}
    wanted = {id(t) for t in inputs} if inputs is not None else None
    handed_out = {id(g._data) for g in grads}  # arrays a .grad must not share (and the memory they view)
    handed_out |= {id(g._data.base) for g in grads if getattr(g._data, "base", None) is not None}

    def own(g: Tensor) -> Tensor:
        """g as a fresh writable buffer that no other .grad (nor the caller's gradient) shares."""
        data = g._data
        base = getattr(data, "base", None)
        if (base is not None and not _whole_view(data, base) or not getattr(data.flags, "writeable", True)
                or id(data) in handed_out or id(base) in handed_out):
            data, base = data.copy(), None
        handed_out.add(id(data))
        if base is not None:
            handed_out.add(id(base))
        out = late_bound.Tensor._wrap(data, g._device)
        if tracer is not None:  # the same value as g (a private copy of it)
            tracer.on_alias(g, out)
        return out

    def add_leaf_grad(t: Tensor, g: Any) -> None:
        """Add `g` (a tensor or a PendingGradient) to the gradient of leaf `t`."""
        entry = leaf_pending.get(id(t))
        if entry is None:
            entry = leaf_pending[id(t)] = (t, GradientSum())
        entry[1].add(g)

    def add_node_grad(node: Node, g: Any) -> None:
        """Add `g` (a tensor or a PendingGradient) to the gradient of `node`'s output."""
        total = pending.get(id(node))
        if total is None:
            total = pending[id(node)] = GradientSum()
        total.add(g)

    def deliver_leaf(key: int) -> None:
        """Run a leaf's hooks on its total gradient of this pass (once), then accumulate into .grad."""
        t, total = leaf_pending.pop(key)
        g = total.total()
        if t._hooks:
            for hook in t._hooks:
                new = hook(g)
                if new is not None:
                    g = new
        if wanted is None:
            accumulate_grad(t, g, create_graph, own)  # hooks run outside the lock
            run_post_accumulate_hooks(t)
        elif key in wanted:
            leaf_results[key] = g

    def release_leaves(node: Node) -> None:
        """`node` has run (or had no gradient): deliver each leaf that no node still to run feeds."""
        for key in node_leaves.get(id(node), ()):
            left = leaf_waits[key] - 1
            leaf_waits[key] = left
            if left == 0 and key in leaf_pending:
                deliver_leaf(key)

    for root, g in zip(roots, grads):
        if root._node is None:
            if root.requires_grad:
                add_leaf_grad(root, g)
            continue
        add_node_grad(root._node, g)
        root_nodes.append(root._node)

    order = _toposort(root_nodes)
    node_leaves, leaf_waits = _leaf_edges(order)
    # Without retain_graph a node lets go of its inputs once its VJP has run, so the forward's
    # saved arrays are freed as the pass goes, not at its end. An output its own node reads
    # (saves_output) is held by its consumers, which run first: it is pinned here until then.
    pinned = {} if retain_graph else {id(n): n.out_ref() for n in order if n.prim.saves_output}
    with set_grad_enabled(create_graph):
        for key in [k for k in leaf_pending if not leaf_waits.get(k)]:  # leaf roots no node feeds
            deliver_leaf(key)
        for node in order:
            total = pending.pop(id(node), None)
            if total is None:
                release_leaves(node)
                continue
            g = total.total()
            node.check_versions()
            if node.hooks:
                for hook in node.hooks:
                    new = hook(g)
                    if new is not None:
                        g = new
            if node.retain_ref is not None:
                kept = node.retain_ref()
                if kept is not None:
                    accumulate_grad(kept, g, create_graph, own)
            if wanted is not None:
                out = node.out_ref()
                if out is not None and id(out) in wanted:
                    prev = leaf_results.get(id(out))
                    leaf_results[id(out)] = g if prev is None else prev + g
            remade = node.recompute(node) if node.recompute is not None else ()
            input_grads = node.prim.vjp(g, node.inputs, node, **node.params)
            to_nodes = {id(_memory(gi._data)) for child, gi in zip(node.edges, input_grads)
                        if gi is not None and child and not isinstance(gi, PendingGradient)
                        } if len(input_grads) > 1 and None in node.edges else ()
            for inp, child, gi in zip(node.inputs, node.edges, input_grads):
                if gi is None or child is False:
                    continue
                if child is None:
                    # shared with a gradient still flowing (x + b): a hook writing to .grad must not change the other
                    if not isinstance(gi, PendingGradient) and id(_memory(gi._data)) in to_nodes:
                        handed_out.add(id(gi._data))
                    add_leaf_grad(inp, gi)
                else:
                    add_node_grad(child, gi)
            if remade and not (retain_graph or create_graph):  # remade inputs are freed now, not at the end
                for t in remade:
                    t._data = None
            if not retain_graph:
                node.inputs = None
                pinned.pop(id(node), None)
            release_leaves(node)
        for key in list(leaf_pending):  # none is left unless the graph changed during this pass
            deliver_leaf(key)
    if not retain_graph:
        for node in order:
            node.inputs = None
    if inputs is not None:
        return [leaf_results.get(id(t)) for t in inputs]
    return None


def default_grad(t: Tensor) -> Tensor:
    """The gradient ``backward()`` starts from without one: ones like `t`, which must hold one element."""
    if t._data.size != 1:
        raise RuntimeError(
            f"grad can be implicitly created only for scalar outputs, got shape {tuple(t.shape)}; "
            "pass a gradient of that shape to backward(gradient=...)"
        )
    data = t._data
    if type(data) is np.ndarray and trace_state.tracer is None:  # eager: the Full kernel's array, directly
        return late_bound.Tensor._wrap(np.full(data.shape, 1, dtype=data.dtype), t._device)
    return late_bound.functional().ones_like(t)


def grad(outputs: Tensor | Sequence[Tensor], inputs: Tensor | Sequence[Tensor],
         grad_outputs: Tensor | Sequence[Tensor] | None = None, retain_graph: bool | None = None,
         create_graph: bool = False, allow_unused: bool = False) -> tuple[Tensor | None, ...]:
    """Gradients of `outputs` with respect to `inputs`, without touching ``.grad``.

    >>> x = kiln.tensor([1.0, 2.0], requires_grad=True)
    >>> (gx,) = kiln.autograd.grad((x * x).sum(), x)
    """
    tensor = late_bound.Tensor
    outs = [outputs] if isinstance(outputs, tensor) else list(outputs)
    ins = [inputs] if isinstance(inputs, tensor) else list(inputs)
    if grad_outputs is None:
        gouts = [default_grad(o) for o in outs]
    else:
        gouts = [grad_outputs] if isinstance(grad_outputs, tensor) else list(grad_outputs)
    retain = create_graph if retain_graph is None else retain_graph
    result = run_backward(outs, gouts, retain, create_graph, inputs=ins)
    assert result is not None
    for t, g in zip(ins, result):
        if g is None and not allow_unused:
            raise RuntimeError(
                f"one of the differentiated tensors (shape {tuple(t.shape)}) was not used in the "
                "graph; pass allow_unused=True if this is expected"
            )
    return tuple(result)
