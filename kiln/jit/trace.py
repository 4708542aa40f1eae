"""Tracing: run the real function once while a thread-local `Tracer` records a Graph.

Every `bind` reports to the tracer (see kiln.ops.primitive), so nested ops inside
composites arrive as primitives. Tensors the tracer has not seen are captured by
reference (read fresh on each call); frontend scalar literals are baked in.
Random keys become "rng" inputs, in-place updates of outside tensors become state
writes, and turning a traced tensor into a Python value is a graph break. A whole
training step (backward and optimizer.step() inside) also touches ``.grad``, optimizer
state and hyperparameters: the tracer hands those to its `StepCapture` (step_trace.py).
"""
from __future__ import annotations

import warnings
import weakref
from typing import Any

import numpy as np

from ..ops.primitive import REGISTRY, AbstractValue, Primitive
from ..trace_state import trace_state
from ..tensor import Tensor
from .hyper import HyperScalar
from .ir import Graph, InputSpec, Node, StateWrite, Value
from ..tensor import Literal
from .step_replay import StepBinding
from .step_trace import StepCapture
from .symbolic import Expr, SymInt, concrete, is_symbolic, symbols
from .user_frames import user_location, user_stacklevel  # noqa: F401 - also imported from here

# (file, line, size expression) already warned about by Tracer.specialize: once per process.
_SPECIALIZED_SITES: set[tuple[str, int, str]] = set()


class GraphBreakError(RuntimeError):
    """A compiled function with fullgraph=True did something that cannot be captured in a graph."""


class Tracer:
    """Records primitive calls into a Graph while the real computation runs."""

    def __init__(self, fullgraph: bool = False):
        self.graph = Graph()
        self.fullgraph = fullgraph
        self.env: dict[int, Value] = {}  # id(tensor) -> its current value
        # value id -> the real tensor seen at trace time, while it lives: the inputs for the trace's life, the
        # tensors the function makes as long as its code or their autograd graph holds them, as in eager
        # execution (a compiled backward is derived from the ones its VJPs read, which that graph keeps)
        self.real: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
        self.keep: list[Any] = []  # objects held for the trace's life (inputs, captured state)
        self._weak_refs: list[weakref.ref] = []  # the other traced tensors, held weakly (`_hold_weakly`)
        self.strides: dict[int, tuple[int, ...]] = {}  # value id -> element strides, where not C-contiguous
        self.traced_bytes = 0  # bytes of the arrays the traced tensors had
        self.graph_break: str | None = None
        self.inputs_by_tensor: dict[int, int] = {}  # id(tensor) -> index into graph.inputs
        self.symbolic = False
        self.views: dict[int, list[Tensor]] = {}  # id(memory owner) -> traced tensors sharing its memory
        self.input_owners: dict[int, int] = {}  # id(memory owner) -> how many distinct inputs share it
        self.stale: set[int] = set()  # ids of traced tensors whose memory an in-place write changed
        self.shape_guards: list = []  # (expr, result) of comparisons on symbolic sizes (dynamic_dims)
        self.concretized: list = []  # (outside tensor, version, value) turned into Python values
        self.branches: list[tuple[Value, bool, str]] = []  # (traced value, its truth, where): bool() taken
        # on a traced tensor; the plan returns the value and is guarded on its truth (kiln/jit/branches.py)
        self._capture: StepCapture | None = None  # .grad, optimizer state and hyperparameters (whole steps)
        self.step_binding: StepBinding | None = None  # what `finish_step` made of them
        self.automatic: frozenset[str] = frozenset()  # symbols of dims made dynamic automatically
        self.specialized_automatic: set[str] = set()  # those of them this trace turned into plain numbers

    # ---- activation ---------------------------------------------------------------
    def __enter__(self) -> "Tracer":
        self._prev = trace_state.tracer
        trace_state.tracer = self
        return self

    def __exit__(self, *exc: object) -> None:
        trace_state.tracer = self._prev

    # ---- inputs -------------------------------------------------------------------
    def add_input(self, tensor: Tensor, spec: InputSpec, shape: tuple | None = None) -> Value:
        value = Value(shape if shape is not None else tuple(tensor._data.shape), tensor.dtype, tensor.device)
        if shape is not None and is_symbolic(shape):
            self.symbolic = True
        self.graph.inputs.append(value)
        self.graph.specs.append(spec)
        if tensor.requires_grad:
            self.graph.requires_grad.add(value.id)
        self._bind(tensor, value)
        self.keep.append(tensor)  # inputs are held for the trace's life
        self.inputs_by_tensor.setdefault(id(tensor), len(self.graph.inputs) - 1)
        owner = id(tensor._base if tensor._base is not None else tensor)
        self.input_owners[owner] = self.input_owners.get(owner, 0) + 1
        return value

    def add_module_inputs(self, module: Any) -> None:
        """A module's parameters and buffers become named inputs, read fresh on every call."""
        for name, p in module.named_parameters():
            if id(p) not in self.env:
                self.add_input(p, InputSpec("param", p, name=name))
        for name, b in module.named_buffers():
            if id(b) not in self.env:
                self.add_input(b, InputSpec("buffer", b, name=name))

    def _bind(self, tensor: Tensor, value: Value) -> None:
        self.env[id(tensor)] = value
        data = tensor._data
        self.traced_bytes += getattr(data, "nbytes", 0)
        found = element_strides(data, value.shape)
        if found is not None:
            self.strides[value.id] = found
        self._hold_weakly(tensor, value.id)

    def _hold_weakly(self, tensor: Tensor, value_id: int | None = None) -> None:
        """Know `tensor` (as `real[value_id]`) until it dies, then forget it and its id: a new tensor that gets
        the id is not mistaken for it."""
        key, env, stale = id(tensor), self.env, self.stale

        def forget(_: Any) -> None:  # (runs while the tensor is freed, before its id can be reused)
            env.pop(key, None)
            stale.discard(key)

        if value_id is not None:
            self.real[value_id] = tensor
        self._weak_refs.append(weakref.ref(tensor, forget))

    def stand_in_for(self, t: Tensor, stand_in: Tensor) -> bool:
        """Make `stand_in` (an autograd node's shape-only stand-in for `t`, unread_inputs.py) the same traced
        value as `t`; False where `t` is not a traced tensor (the node then keeps `t` itself)."""
        value = self.env.get(id(t))
        if value is None:
            return False
        self.env[id(stand_in)] = value
        self._hold_weakly(stand_in)
        return True

    def value_of(self, t: Tensor) -> Value:
        """The value of a tensor: known, or a captured outside tensor / baked literal."""
        v = self.env.get(id(t))
        if v is not None:
            if self.stale and id(t) in self.stale:
                self._alias_break("a read of a tensor whose memory an earlier in-place update changed "
                                  "through another view")
            return v
        if type(t) is Literal:
            return self.add_input(t, InputSpec("literal", t, literal=t._data))
        if self._capture is not None:  # a .grad or optimizer state entry: read through its path
            spec = self._capture.known.get(id(t))
            if spec is not None:
                return self.add_input(t, spec)
        return self.add_input(t, InputSpec("captured", t))

    def shape_of(self, t: Tensor) -> tuple:
        v = self.env.get(id(t))
        return v.shape if v is not None else t._data.shape

    # ---- hooks called by bind and the Tensor methods ------------------------------
    def record(self, prim: Primitive, inputs: tuple, params: dict, out: Tensor) -> None:
        capture = self._capture
        if capture is not None and capture.hypers_seen and params:  # hyperparameters are read per call
            if prim.name == "full" and isinstance(params.get("value"), HyperScalar) and \
                    capture.bind_hyper_input(out, params):
                return
            params = capture.plain_params(params)
        vals = [self.value_of(t) for t in inputs]
        shape = self._out_shape(prim, vals, params, out)
        value = Value(shape, out.dtype, out.device)
        self.graph.nodes.append(Node(prim, vals, params, value))
        if out.requires_grad:
            self.graph.requires_grad.add(value.id)
        self._bind(out, value)
        if out._base is not None:
            self._note_view(out)

    def _note_view(self, view: Tensor) -> None:
        """Remember a traced view of another tensor's memory (an in-place write makes it stale); weakly, as a
        view holds its base."""
        self.views.setdefault(id(view._base), []).append(weakref.ref(view))

    def _views_of(self, owner: Tensor) -> list[Tensor]:
        return [v for v in (ref() for ref in self.views.get(id(owner), ())) if v is not None]

    def _out_shape(self, prim: Primitive, vals: list[Value], params: dict, out: Tensor) -> tuple:
        traced = tuple(out._data.shape)
        if not self.symbolic:
            return traced
        try:
            aval = prim.abstract(*[AbstractValue(v.shape, v.dtype) for v in vals], **params)
        except Exception:  # noqa: BLE001 - fall back to the concrete shape
            return traced
        shape = tuple(aval.shape)
        if len(shape) != len(traced) or any(concrete(a) != b for a, b in zip(shape, traced)):
            return traced
        return shape

    def on_rng_key(self, key: Tensor, generator: Any, count: int) -> None:
        """A random op's [seed, offset] key: an input drawn afresh from `generator` on each call.

        A generator created inside the traced function is a graph break: eager makes a fresh
        one (so the same numbers) on every call, a plan would keep drawing from this one.
        """
        created = self._local_generators().get(id(generator))
        if created is not None:
            self._break(f"random state: a random op at {user_location()} draws from a kiln.Generator created "
                        f"inside the compiled function (at {created[1]}). Eager code creates a fresh generator, "
                        "and so draws the same numbers, on every call; a compiled plan would keep drawing new "
                        "numbers from the generator made while tracing. Fix: create (and seed) the generator "
                        "outside the compiled function and pass it in as an argument or close over it; "
                        + self._eager_fallback())
        self.add_input(key, InputSpec("rng", (generator, count)))

    def on_new_generator(self, generator: Any) -> None:
        """A kiln.Generator created while tracing: remembered (with where) until a random op uses it."""
        self._local_generators()[id(generator)] = (generator, user_location())

    def on_rng_state(self, call: str, generator: Any) -> None:
        """`call` changes or reads a generator's state (kiln.manual_seed, set_rng_state, ...): a
        graph break, since eager code does it on every call and a compiled plan would not. The
        state of a generator created inside the function is its own business (only drawing from
        it breaks, see `on_rng_key`)."""
        if id(generator) in self._local_generators():
            return
        reads = call.startswith("reading") or "get_" in call or "initial_seed" in call
        effect = ("returns the state of that moment, while a compiled plan would keep the value seen "
                  "while tracing" if reads else "changes the random stream, while a compiled plan would "
                  "skip it (it only replays the random ops, each call drawing the next numbers)")
        fix = ("read the state outside the compiled function" if reads else
               "seed or set the state outside the compiled function (kiln.manual_seed(s) before calling it), "
               "or create a kiln.Generator outside, seed it there and pass it in (generator=)")
        self._break(f"random state: `{call}` at {user_location()} inside a compiled function. Eager code runs it "
                    f"on every call and {effect}. Fix: {fix}; " + self._eager_fallback())

    def _local_generators(self) -> dict[int, tuple[Any, str]]:
        """id -> (generator, where it was created) for the generators created while tracing."""
        return self.__dict__.setdefault("_generators_made_here", {})

    def _eager_fallback(self) -> str:
        return ("or compile with fullgraph=False to fall back to eager for this call signature."
                if self.fullgraph else "this call signature now runs eagerly.")

    def specialize(self, sym: Any, why: str, site: tuple[str, int, str]) -> None:
        """A symbolic size became a plain Python value (``int(B)``, ``f"{B}"``, ``np.prod(x.shape)``,
        see kiln.jit.symbolic): pin it with a shape guard ``B == <traced size>`` and warn once.

        The plan stays valid for the traced size only; a call at another size fails the guard and
        retraces, so results always equal eager. The RuntimeWarning names the conversion, the
        user's file:line (`site`, from symbolic.conversion_site) and the fix, once per source line
        and size expression for the whole process (`_SPECIALIZED_SITES`): not once per call or
        retrace, and one line converting B three ways warns once, naming the first conversion.
        Under fullgraph=True this is not a graph break: the graph is still whole, only pinned to
        one size, so it specializes and warns the same way.
        """
        value = concrete(sym)
        self.shape_guards.append((Expr("==", sym.expr, value), True))
        names = set(symbols(sym))
        if names and names <= self.automatic:  # dims made dynamic by kiln, not by the user: no warning,
            self.specialized_automatic |= names  # the caller makes them static again (auto_dynamic.py)
            return
        filename, lineno, via = site
        expr = str(sym.expr)
        key = (filename, lineno, expr)
        if key in _SPECIALIZED_SITES:
            return
        _SPECIALIZED_SITES.add(key)
        sizes = self._symbol_sizes()
        pinned = ", ".join(f"{name} == {sizes[name]}" for name in symbols(sym) if name in sizes and name != expr)
        pinned = f" ({pinned})" if pinned else ""
        message = (f"dynamic_dims: the symbolic size {expr} (= {value} in this trace) became a plain Python "
                   f"value through {why} at {filename}:{lineno}{via}. The compiled plan is specialized to "
                   f"{expr} == {value}{pinned}: it is reused only at that size, and each call at another "
                   "size retraces (it does not see the new size). Fix: keep the size symbolic: compute with "
                   "x.shape arithmetic and tensor ops (kiln.arange(x.shape[0]), x.sum() / x.shape[0], "
                   "x.reshape(x.shape[0], -1)) instead of Python or NumPy numbers and strings, or drop this "
                   "dim from dynamic_dims if its size never changes.")
        warnings.warn_explicit(message, RuntimeWarning, filename, lineno)

    def _symbol_sizes(self) -> dict[str, int]:
        """Each dynamic_dims name's size in this trace, read from the inputs' symbolic shapes."""
        sizes: dict[str, int] = {}
        for value in self.graph.inputs:
            for d in value.shape:
                if isinstance(d, SymInt) and d.expr.op == "sym":
                    sizes.setdefault(d.expr.args[0], concrete(d))
        return sizes

    def on_concretize(self, t: Tensor, why: str) -> None:
        if id(t) not in self.env:  # an outside tensor: the plan bakes in its value, so it is guarded
            if all(seen is not t for seen, _, _ in self.concretized):
                self.concretized.append((t, t._version, t._data.copy()))
            return
        where = user_location()
        if why == "bool" and not self.fullgraph and t._data.size == 1 and id(t) not in self.stale:
            # a branch: the plan follows this path and returns the tensor, to check its truth per call
            self.branches.append((self.value_of(t), bool(t._data.reshape(())), where))
            return
        fix = ("or compile with fullgraph=False to fall back to eager for this call signature."
               if self.fullgraph else "this call signature now runs eagerly.")
        message = (f"data-dependent Python control flow: `{why}` on a traced tensor at {where}. "
                   "The graph cannot capture a Python value computed from tensor data. Fix: return the "
                   "tensor and convert it outside the compiled function (e.g. `loss.item()` after the "
                   "compiled train step returns the loss), or use tensor ops (kiln.where, masking) instead "
                   f"of Python branches; {fix}")
        self._break(message)

    def _break(self, message: str) -> None:
        if self.fullgraph:
            raise GraphBreakError(message)
        if self.graph_break is None:
            self.graph_break = message

    def _alias_break(self, what: str) -> None:
        self._break(f"aliased memory: {what} at {user_location()}. The graph cannot follow writes "
                    "through views that share memory. Fix: update the tensor itself out of place "
                    "(y = y + delta), or clone() the view before updating it in place; with "
                    "fullgraph=False this call signature falls back to eager.")

    def on_detach(self, src: Tensor, dst: Tensor) -> None:
        if id(src) not in self.env:
            return
        v = self.value_of(src)  # (a stale read through value_of breaks the graph, as any read does)
        out = Value(v.shape, v.dtype, v.device)
        self.graph.nodes.append(Node(REGISTRY["stop_gradient"], [v], {}, out))
        self._bind(dst, out)
        if dst._base is not None:
            self._note_view(dst)

    def on_alias(self, src: Tensor, dst: Tensor) -> None:
        """dst holds the same value as src (e.g. the saved copy in an in-place op)."""
        v = self.value_of(src)
        self.env[id(dst)] = v
        self._hold_weakly(dst, v.id)  # a snapshot: it keeps the value when src is updated in place

    def on_inplace(self, target: Tensor, new: Tensor) -> None:
        """`target` now holds `new`'s value; outside tensors get a state write."""
        value = self.value_of(new)
        index = self.inputs_by_tensor.get(id(target))
        owner = target._base if target._base is not None else target
        self._mark_aliases_stale(target, owner)
        self.env[id(target)] = value
        self.real[value.id] = target  # it holds the value now (`new` may be a temporary); a later in-place
        # update of it that a VJP must not see snapshots the value first (`on_alias`)
        if index is None:
            if owner is not target and id(owner) in self.inputs_by_tensor:
                self._alias_break("an in-place update through a view of an input")
            return  # an intermediate created inside the function: nothing to write back
        if self.input_owners.get(id(owner), 0) > 1:
            self._alias_break("an in-place update of an input that shares memory with another input")
        if new.requires_grad:
            self._break(f"an in-place update of an input with a value that requires grad at {user_location()}. "
                        "Eager autograd makes the updated input part of the graph, which a compiled plan "
                        "cannot do. Fix: return the new value (y = x + delta) instead of updating the "
                        "input in place; with fullgraph=False this call signature falls back to eager.")
        spec = self.graph.specs[index]
        if spec.kind == "arg":
            write = StateWrite("arg", spec.ref, value)
        elif spec.kind in ("param", "buffer", "captured"):
            write = StateWrite("tensor", spec.ref, value)
        elif spec.kind in ("optstate", "grad"):  # optimizer state, or a .grad left by an earlier backward
            write = StateWrite(spec.kind, spec.ref, value)
        else:
            return
        self.graph.state_writes = [w for w in self.graph.state_writes
                                   if not (w.kind == write.kind and w.ref is write.ref)] + [write]

    def _mark_aliases_stale(self, target: Tensor, owner: Tensor) -> None:
        """After writing `target` in place, the other traced tensors sharing its memory hold stale values."""
        views = self._views_of(owner)
        if not views and owner is target:
            return
        xp = target._device.xp
        for v in views:
            if v is not target and xp.may_share_memory(v._data, target._data):
                self.stale.add(id(v))
        if owner is not target and id(owner) in self.env:
            self.stale.add(id(owner))
        self.stale.discard(id(target))

    # ---- whole training steps: .grad, optimizers, hyperparameters (step_trace.py) ----
    def step_capture(self) -> StepCapture:
        """The capture of what this trace does to ``.grad``, optimizers and hyperparameters."""
        if self._capture is None:
            self._capture = StepCapture(self)
        return self._capture

    def on_grad_read(self, t: Tensor) -> Tensor | None:
        """``t.grad`` read while tracing: a grad left by an earlier call becomes an input."""
        return self.step_capture().grad_read(t)

    def on_grad_write(self, t: Tensor, value: Tensor | None) -> None:
        """``t.grad = value`` while tracing: the grad t holds at the end is set on every call."""
        self.step_capture().grad_write(t)

    def on_backward(self) -> None:
        """``backward()`` ran inside the trace: its VJPs are recorded as ops of this graph."""
        self.step_capture().backward_ran = True

    def on_optimizer(self, optimizer: Any) -> None:
        """An optimizer's zero_grad() or step() runs inside the trace."""
        self.step_capture().register(optimizer)

    def finish_step(self) -> None:
        """After the outputs are set: the grads and optimizer state to set on each call become
        extra outputs, and `step_binding` says how to use them (None if nothing was touched)."""
        if self._capture is not None:
            self.step_binding = self._capture.finish(len(self.graph.outputs))

    # ---- outputs ------------------------------------------------------------------
    def set_outputs(self, tensors: list[Tensor]) -> None:
        self.graph.outputs = [self.value_of(t) for t in tensors]


def element_strides(data: Any, shape: tuple) -> tuple[int, ...] | None:
    """The element strides of an array of `shape` that is not C-contiguous (the layout a replay will
    most likely give that value too), else None. Symbolic sizes are compared by their traced values:
    this is kiln's bookkeeping, which must not guard a plan (it runs inside traces)."""
    if (isinstance(data, np.ndarray) and not data.flags.c_contiguous
            and data.shape == tuple(concrete(d) for d in shape) and not any(s % data.itemsize for s in data.strides)):
        return tuple(s // data.itemsize for s in data.strides)
    return None


def symbolic_shape(shape: tuple, dims: dict[int, str]) -> tuple:
    """A shape with the dims named in `dims` replaced by SymInts.

    Sizes 0 and 1 stay concrete (as in PyTorch): broadcasting, squeeze and empty
    reductions treat them specially, so a plan traced at size 1 would be wrong at
    other sizes. The cache key keeps them concrete too (see `dynamic_key_dim`).
    """
    return tuple(SymInt(d, Expr.sym(dims[i])) if i in dims and dynamic_key_dim(d) else d
                 for i, d in enumerate(shape))


def dynamic_key_dim(size: int) -> bool:
    """Whether a dim named in dynamic_dims is symbolic at this size (0 and 1 are specialized)."""
    return size > 1


class Trace:
    """What one traced run produced: the tracer (its graph), the real result and its flattened leaves."""

    def __init__(self, tracer: Tracer, result: Any, out_leaves: list, out_treedef: Any,
                 leaf_of_tensor: dict[int, int], in_leaves: list):
        self.tracer = tracer
        self.in_leaves = in_leaves  # the flattened arguments of the traced call
        self.graph = tracer.graph
        self.result = result
        self.out_leaves = out_leaves
        self.out_treedef = out_treedef
        self.leaf_of_tensor = leaf_of_tensor  # id(argument tensor) -> its first leaf index


def trace(fn: Any, args: tuple, kwargs: dict | None = None, *, fullgraph: bool = False,
          dynamic: dict[int, dict[int, str]] | None = None, module: Any = None,
          no_grad: bool = False, optimizers: tuple = (), automatic: frozenset[str] = frozenset()) -> Trace:
    """Run ``fn(*args, **kwargs)`` once while a fresh `Tracer` records it.

    Each distinct tensor leaf of the arguments becomes an "arg" input (its spec's ref is
    the leaf index); `dynamic` maps a leaf index to the dims that are symbolic
    ({dim: name}); a `module`'s parameters and buffers are inputs too; the tensor leaves of the result become the graph's outputs. With
    `no_grad`, the function runs without recording gradients (inference tracing). The
    `optimizers` the function reaches are registered before it runs (see step_trace.py). The
    `automatic` symbols are dims kiln made dynamic by itself: specializing one does not warn, it is
    noted in ``tracer.specialized_automatic``.
    """
    from .. import autograd  # noqa: PLC0415 - kiln.autograd imports the tensor module first
    from .pytree import flatten  # noqa: PLC0415

    kwargs = kwargs or {}
    dynamic = dynamic or {}
    tracer = Tracer(fullgraph)
    tracer.automatic = automatic
    leaf_of_tensor: dict[int, int] = {}
    in_leaves = flatten((args, kwargs))[0]
    for i, x in enumerate(in_leaves):
        if isinstance(x, Tensor) and id(x) not in leaf_of_tensor:
            leaf_of_tensor[id(x)] = i
            shape = symbolic_shape(x._data.shape, dynamic[i]) if i in dynamic else None
            tracer.add_input(x, InputSpec("arg", i), shape=shape)
    if module is not None:
        tracer.add_module_inputs(module)
    for optimizer in optimizers:  # their state as it is now: read through its path wherever the function reads it
        tracer.on_optimizer(optimizer)
    with tracer:
        if no_grad:
            with autograd.no_grad():
                result = fn(*args, **kwargs)
        else:
            result = fn(*args, **kwargs)
    out_leaves, out_treedef = flatten(result)
    tracer.set_outputs([t for t in out_leaves if isinstance(t, Tensor)])
    tracer.finish_step()
    return Trace(tracer, result, out_leaves, out_treedef, leaf_of_tensor, in_leaves)
