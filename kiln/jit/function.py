"""`JITFunction` (= `CompiledFunction`): the call path of a compiled callable.

Life of a call: flatten the arguments into leaves, build the `CacheKey`
(keys.py), and on a hit replay the cached plan. On a miss, trace the real
function (its results are this call's results; trace.py), build an entry
(build.py: differentiate, passes, lowering), log why it missed (misslog.py)
and cache it. A function bound to an nn.Module (``kiln.compile(model.forward)``)
is keyed on the module's state exactly like a compiled module.
"""
from __future__ import annotations

import enum
import functools
import threading
import time
from typing import Any, Callable

import numpy as np

from .. import autograd
from ..allocator import release_free_memory
from ..device import Device
from ..dtypes import DType
from ..trace_state import trace_state
from ..tensor import DataEpoch, Tensor
from . import debug
from ..device import cuda_is_available
from ..ops.device_copy import to_gpu
from .auto_dynamic import AutoDynamicDims, describe_marked, widen
from .backends import get_backend
from .branches import MAX_PATHS, WRONG_PATH, branch_problem
from .branches import describe as describe_branches
from .build import build_entry
from .cache import CacheKey, CompilationStats, PlanCache
from .executor import FallbackEntry
from .guards import Guards
from .ir import Graph
from .keys import KeyBuilder, arg_of_leaf, validate_dynamic_dims
from .misslog import MissLog, MissReason, warn_once
from .module_state import ModuleState
from .passes import PassLog
from .pytree import flatten, unflatten
from .chain_values import Compiled
from .step_replay import state_entry
from .symbolic import SymFloat, SymInt, guards_hold, is_symbolic, resolve_leaf
from .trace import GraphBreakError, Trace, Tracer, trace

_STATIC_OUTPUTS = (Tensor, int, float, bool, str, bytes, complex, type(None), type(Ellipsis), slice, range, type,
                   frozenset, enum.Enum, np.generic, DType, Device, SymInt, SymFloat)  # outputs a plan may return
# (a returned SymInt/SymFloat comes back as each call's plain number: see resolve_output_statics)


def _reusable(entry: Any, dims: dict | None, leaves: list) -> bool:
    """The entry fits this call: captured tensors as traced, outside tensors read as Python
    values unchanged, (dynamic_dims) the Python branches taken on symbolic sizes while
    tracing go the same way for this call's sizes, and (whole training steps) the
    optimizer state, grads and hyperparameter branches are as traced."""
    return _stale_reason(entry, dims, leaves) is None


MAX_SIZE_VARIANTS = 4  # plans kept under one key that differ only in the sizes they specialized to
# stale reasons whose plans are kept as variants: the state they were traced for may come back
# (another size; .grad None again after an outside zero_grad; a flag flipped back)
_VARIANT_KINDS = ("shape guard", "grad", "hyperparameter", "output layout")


def _serving(entry: Any, dims: dict | None, leaves: list) -> Any:
    """The plan among `entry` and its size variants that can serve this call, or None.

    Plans specialized to different sizes of a dynamic dim (``int(B)``, a branch on B) share
    one key; each keeps the others it replaced in `size_variants`, so calls alternating
    between sizes reuse them instead of retracing every call.
    """
    if _reusable(entry, dims, leaves):
        return entry
    for variant in getattr(entry, "size_variants", ()):
        if _reusable(variant, dims, leaves):
            return variant
    return None


def _run_paths(entry: Any, leaves: list, dims: dict | None) -> Any:
    """The first of `entry`'s branch paths whose guards hold for this call (moved to the front), else
    WRONG_PATH. An error on a path counts as a wrong path: the right one, or the trace, decides."""
    paths = entry.paths
    for i, path in enumerate(list(paths)):
        try:
            out = path.run(leaves, dims)
        except Exception:  # noqa: BLE001 - e.g. an index check failing on a path this call does not take
            out = WRONG_PATH
        if out is not WRONG_PATH:
            if i and path in paths:  # most recently used first
                paths.remove(path)
                paths.insert(0, path)
            return out
    return WRONG_PATH


def _result_of(traced: Trace) -> Any:
    """What the traced call returns to its caller (a returned symbolic size as a plain int, as eager)."""
    if is_symbolic(traced.out_leaves):
        return unflatten(traced.out_treedef, [resolve_leaf(x, None) for x in traced.out_leaves])
    return traced.result


def _stale_reason(entry: Any, dims: dict | None, leaves: list) -> MissReason | None:
    """Why a cached entry with this call's key cannot serve it (None when it can)."""
    for tensor, requires_grad in getattr(entry, "captured", ()):
        if tensor.requires_grad != requires_grad:  # a plan differentiates exactly what required grad
            return MissReason(f"a captured tensor's requires_grad changed: {requires_grad} -> {not requires_grad}",
                              "requires_grad", "captured tensor", requires_grad, not requires_grad)
    for i, (tensor, version, value) in enumerate(getattr(entry, "value_guards", ())):
        if tensor._version != version and not _same_value(tensor._data, value):
            return MissReason(f"an outside tensor read as a Python value (`{value.reshape(-1)[:4].tolist()}`...) "
                              "changed", "tensor value", f"outside tensor {i}", value, tensor._data)
    guards = getattr(entry, "shape_guards", None)
    if guards and not guards_hold(guards, dims):
        return MissReason("a Python branch on a dynamic size goes the other way for these sizes", "shape guard")
    if getattr(entry, "data_epoch", DataEpoch.value) != DataEpoch.value:  # some tensor got another array
        reason = _held_tensor_changed(entry)
        if reason is not None:
            return reason
        entry.data_epoch = DataEpoch.value
    layout = getattr(entry, "layout", None)
    if layout is not None and layout.aliases:
        reason = layout.aliases.stale_reason(leaves)
        if reason is not None:
            return MissReason(reason, "output layout")
    binding = getattr(entry, "binding", None)
    if binding is not None:
        return binding.stale_reason(leaves)
    return None


def _held_tensor_changed(entry: Any) -> MissReason | None:
    """A parameter, buffer, captured tensor or optimizer state entry that now holds an array of
    another shape or dtype than the plan was traced for (``p.data = t``, ``module.double()``)."""
    for value, spec in zip(entry.graph.inputs, entry.graph.specs):
        if spec.kind in ("param", "buffer", "captured"):
            data = spec.ref._data
        elif spec.kind == "optstate":
            data = state_entry(spec.ref)._data
        else:
            continue
        if data.shape != value.shape or data.dtype != value.dtype.np:
            name = spec.name or spec.kind
            return MissReason(f"`{name}` now holds a {data.dtype} array of shape {data.shape}, not the "
                              f"{value.dtype.name} {value.shape} the plan was traced for", "held tensor", name,
                              value.shape, data.shape)
    return None


def _same_value(data: Any, value: np.ndarray) -> bool:
    """Bitwise equality (NaN payloads and -0.0 included) of a tensor's array and a saved copy."""
    return data.shape == value.shape and data.dtype == value.dtype and \
        np.ascontiguousarray(data).tobytes() == value.tobytes()


RELEASE_AFTER_BYTES = 256 << 20
"""A compile whose trace held this many bytes of arrays hands the freed memory back to the OS
afterwards (allocator.release_free_memory): a real-size model, whose trace frees gigabytes that
the plan never reuses."""


def _module_of(fn: Any) -> Any:
    """The nn.Module a bound method belongs to (its state keys the plans), else None."""
    from ..nn.module import Module  # noqa: PLC0415 - kiln.nn imports kiln.jit

    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, Module) else None


class JITFunction(Compiled):
    """A compiled callable: traces on a miss, replays the cached plan on a hit.

    >>> @kiln.compile
    ... def f(x):
    ...     return (x * 2).relu().sum()
    >>> f(kiln.randn(4)); f.stats.misses
    1
    """

    def __init__(self, fn: Callable, *, fullgraph: bool = False, max_cache_entries: int | None = None,
                 max_cache_size: int | None = None, eviction: str = "lru", dynamic_dims: Any = None,
                 backend: Any = "auto", passes: list | None = None, show_graph: bool = False,
                 auto_device: bool = False, dynamic: bool | None = None):
        if not callable(fn):
            raise TypeError(f"kiln.compile() expects an nn.Module or a callable, got {type(fn)}")
        functools.update_wrapper(self, fn, updated=())
        if "__name__" not in self.__dict__:  # a callable object or a partial: name it by its type
            self.__name__ = self.__qualname__ = type(fn).__name__
        self._fn = fn
        if not isinstance(fullgraph, bool):
            raise TypeError(f"fullgraph must be True or False, got {fullgraph!r}")
        self.fullgraph = fullgraph
        if max_cache_entries is not None and max_cache_size is not None and max_cache_entries != max_cache_size:
            raise ValueError("pass max_cache_entries or its alias max_cache_size, not both")
        size = max_cache_entries if max_cache_entries is not None else (
            max_cache_size if max_cache_size is not None else 8)
        self._cache = PlanCache(size, eviction)
        self.dynamic_dims = validate_dynamic_dims(dynamic_dims)
        self._auto = AutoDynamicDims(dynamic, reserved={n for dims in self.dynamic_dims.values()
                                                         for n in dims.values()})
        self.dynamic = self._auto.mode
        self.backend_name, self._lower = get_backend(backend)
        if not isinstance(auto_device, bool):
            raise TypeError(f"auto_device must be True or False, got {auto_device!r}")
        self.auto_device = auto_device
        self._place_on_gpu = auto_device and cuda_is_available()  # without a GPU, auto_device does nothing
        self.passes = _checked_passes(passes)
        self.show_graph = show_graph
        self.stats = CompilationStats()
        self._lock = threading.RLock()
        self._warned: set[str] = set()
        self._log = MissLog(self.__name__, self.stats, self._warn_once)
        self._pass_logs: dict[CacheKey, PassLog] = {}
        self._latest_logs: tuple = ()  # the latest compile's (name, PassLog): the only ones keeping graphs
        self._keys = KeyBuilder(fn, self.dynamic_dims, self.backend_name)
        self._owner = _module_of(fn)  # a bound module method is keyed like a compiled module
        self._module_state = ModuleState()
        self._guards = Guards(fn, covered=self._owner)  # closure, global, attribute and default reads
        self._positional_treedefs: dict[int, Any] = {}
        self._outgrown: dict[CacheKey, Any] = {}  # key -> why its trace was not compiled (a MissReason)
        self._release_memory = False  # set by a compile whose trace held RELEASE_AFTER_BYTES or more
        self._release_next_call = False  # then once more on the next call: see __call__

    # ---- the call path --------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        lazy = trace_state.lazy
        if lazy is not None:  # inside a djit call: what it recorded runs first, then this plan, unrecorded
            lazy.realize()
            trace_state.lazy = None
            try:
                return self(*args, **kwargs)
            finally:
                trace_state.lazy = lazy
        if self._place_on_gpu:
            args, kwargs = to_gpu(args), to_gpu(kwargs)
        if trace_state.tracer is not None:  # inside another trace: inline, so the outer graph sees it
            return self._call_eager(args, kwargs)
        if self._release_next_call:  # what the compiling call returned held its trace's forward arrays
            self._release_next_call = False  # (a training call's graph, until its backward): freed by now
            release_free_memory()
        leaves, treedef = self._flatten_call(args, kwargs)
        key, dims, dynamic = self._make_key(args, kwargs, leaves, treedef)
        entry = self._cache.get(key)
        if entry is not None:
            serving = _serving(entry, dims, leaves)
            if serving is not None:
                return self._run_cached(serving, args, kwargs, leaves, dims, (key, dynamic, treedef))
        elif self._auto.by_structure:  # no plan for these exact sizes: the one with the dynamic dims
            auto = self._auto.dims_for(treedef)
            if auto:
                key, dims, dynamic = widen((key, dims, dynamic), auto)
                entry = self._cache.get(key)
                serving = _serving(entry, dims, leaves) if entry is not None else None
                if serving is not None:
                    return self._run_cached(serving, args, kwargs, leaves, dims, (key, dynamic, treedef))
        result = self._compile_and_run(key, dims, dynamic, args, kwargs, leaves, treedef)
        if self._release_memory:  # the trace's arrays are garbage now: give their memory back
            self._release_memory, self._release_next_call = False, True
            release_free_memory()
        return result

    def _run_cached(self, entry: Any, args: tuple, kwargs: dict, leaves: list, dims: dict | None,
                    keyed: tuple | None = None) -> Any:
        if entry.kind == "fallback":
            with self._lock:
                self.stats.fallbacks += 1
            return self._call_eager(args, kwargs)
        start = time.perf_counter()
        if getattr(entry, "branches", ()):  # one plan per path of data-dependent branches (branches.py)
            out = _run_paths(entry, leaves, dims)
            if out is WRONG_PATH:  # a path this call signature has not met: trace it
                key, dynamic, treedef = keyed  # type: ignore[misc]
                return self._compile_and_run(key, dims, dynamic, args, kwargs, leaves, treedef, path_of=entry)
        else:
            out = entry.run(leaves, dims)
        with self._lock:
            self.stats.hits += 1
            self.stats.total_cached_exec_time_ms += (time.perf_counter() - start) * 1e3
        return out

    def _flatten_call(self, args: tuple, kwargs: dict) -> tuple[list, Any]:
        """flatten((args, kwargs)), with a shortcut for the common all-tensor positional call."""
        if not kwargs:
            for a in args:
                if not isinstance(a, Tensor):
                    break
            else:
                treedef = self._positional_treedefs.get(len(args))
                if treedef is None:
                    treedef = self._positional_treedefs[len(args)] = flatten((args, kwargs))[1]
                return list(args), treedef
        return flatten((args, kwargs))

    def _call_eager(self, args: tuple, kwargs: dict) -> Any:
        return self._target()(*args, **kwargs)

    def _target(self) -> Callable:
        """What a trace runs (and a fallback calls): the function, or a module's forward."""
        return self._fn

    def _module_key(self) -> tuple:
        """The module state part of the key: () for a plain function."""
        return self._module_state.key([self._owner]) if self._owner is not None else ()

    def _make_key(self, args: tuple, kwargs: dict, leaves: list, treedef: Any) -> tuple[CacheKey, Any, Any]:
        return self._keys.key(args, kwargs, leaves, treedef, self._guards.key(args, kwargs), self._module_key())

    def _widen(self, keyed: tuple[CacheKey, Any, Any], args: tuple,
               treedef: Any) -> tuple[tuple[CacheKey, Any, Any], list[str]]:
        """A call with no plan for its key: (its key with the dims made dynamic so far, automatically
        (auto_dynamic.py), and explain() lines for dims this call marks)."""
        key = keyed[0]
        marked = self._auto.mark_changed(key, [*self._cache.keys(), self._log.last_key]) or \
            (self._auto.mark_all(key) if key.structure not in self._auto.by_structure else [])
        auto = self._auto.dims_for(treedef)
        if not auto:
            return keyed, []
        return widen(keyed, auto), describe_marked(marked, lambda leaf: arg_of_leaf(args, leaf))

    # ---- compiling ------------------------------------------------------------------
    def _compile_and_run(self, key: CacheKey, dims: dict | None, dynamic: dict, args: tuple, kwargs: dict,
                         leaves: list, treedef: Any, path_of: Any = None) -> Any:
        """Trace the call, cache what it compiles to and return its result. `path_of`: the entry whose
        branch paths this call took none of; the new path's plan joins them (branches.py)."""
        with self._lock:
            if path_of is not None:
                return self._trace_path(key, dims, dynamic, args, kwargs, path_of)
            if self._guards.refresh(args, kwargs):  # the guarded reads changed: key them afresh
                key, dims, dynamic = self._make_key(args, kwargs, leaves, treedef)
            marked: list[str] = []
            if self._auto.enabled and self._cache.get(key) is None:
                (key, dims, dynamic), marked = self._widen((key, dims, dynamic), args, treedef)
            old = self._cache.get(key)
            serving = _serving(old, dims, leaves) if old is not None else None
            if serving is not None:  # another thread compiled it meanwhile
                return self._run_cached(serving, args, kwargs, leaves, dims, (key, dynamic, treedef))
            stale = _stale_reason(old, dims, leaves) if old is not None else None  # same key, but it cannot serve
            # (with no entry: the reason this key's last trace was not compiled, if it was not; see below)
            reason = stale if old is not None else self._outgrown.pop(key, None)
            start = time.perf_counter()
            mark = self._log.mark()
            try:
                self._log.note_miss(key, self._cache.keys(), self._cache.max_entries, self._guards.describe,
                                    lambda leaf: arg_of_leaf(args, leaf), reason)
                self._log.lines.extend(marked)
                self._report_notes()
                debug.log_miss(self.__name__, self.stats.misses + 1, self.stats.miss_reasons[-1])
                self.stats.traces += 1
                traced = self._trace_call(args, kwargs, dynamic)
                self._log.lines.extend(self._auto.unmark(traced.tracer.specialized_automatic))
                outgrown = self._outgrown_by_its_call(traced)
                entry = self._entry_for(key, traced) if outgrown is None else None
                self._release_memory = traced.tracer.traced_bytes >= RELEASE_AFTER_BYTES
            except BaseException:  # an error or a KeyboardInterrupt: no entry, and no miss recorded
                self._log.roll_back(mark)
                self._pass_logs.pop(key, None)
                raise
            self.stats.misses += 1
            if entry is None:  # the trace ran the call; its plan could serve no later one: not built
                self._outgrown[key] = outgrown
                self._log.lines.append(f"  not compiled: this call changed what its plan is guarded on "
                                       f"({outgrown}), so the plan could not serve the next call; the next "
                                       "call compiles")
                self._log.last_key = key
                self.stats.total_compile_time_ms += (time.perf_counter() - start) * 1e3
                return _result_of(traced)
            if stale is not None and stale.kind in _VARIANT_KINDS and getattr(entry, "kind", None) != "fallback":
                variants = [old, *getattr(old, "size_variants", ())]  # kept: another size may come back
                entry.size_variants = variants[:MAX_SIZE_VARIANTS - 1]
                self.stats.evictions += len(variants) - len(entry.size_variants)
            else:
                self.stats.evictions += stale is not None
            for old in self._cache.put(key, entry):
                self.stats.evictions += 1
                self._pass_logs.pop(old, None)
            self.stats.cache_size = len(self._cache)
            self._log.trim()
            self.stats.total_compile_time_ms += (time.perf_counter() - start) * 1e3
            self._log.last_key = key
            return _result_of(traced)

    def _trace_call(self, args: tuple, kwargs: dict, dynamic: dict) -> Trace:
        """Run the call under a tracer, as this function's options say."""
        return trace(self._target(), args, kwargs, fullgraph=self.fullgraph, dynamic=dynamic, module=self._owner,
                     optimizers=self._guards.optimizers, automatic=self._auto.names())

    def _trace_path(self, key: CacheKey, dims: dict | None, dynamic: dict, args: tuple, kwargs: dict,
                    path_of: Any) -> Any:
        """Trace a call whose data-dependent branches went a way no plan of its signature follows, and
        keep the new path's plan beside the others (or run the signature eagerly from now on)."""
        start = time.perf_counter()
        mark = self._log.mark()
        try:
            self._log.lines.append(f"miss #{self.stats.misses + 1}: a data-dependent branch went another way "
                                   f"than in the {len(path_of.paths)} path(s) compiled for this call signature")
            debug.log_miss(self.__name__, self.stats.misses + 1, ["a branch went another way"])
            self.stats.traces += 1
            traced = self._trace_call(args, kwargs, dynamic)
            entry = self._entry_for(key, traced)
        except BaseException:  # as in _compile_and_run: no entry, and no miss recorded
            self._log.roll_back(mark)
            raise
        self.stats.misses += 1
        branched = getattr(entry, "branches", ())
        if entry.kind != "fallback" and (not branched or len(path_of.paths) >= MAX_PATHS):
            why = (f"more than {MAX_PATHS} paths through data-dependent branches" if branched
                   else "a path without a data-dependent branch where others have one")
            entry = FallbackEntry(why)
            self._log.lines.append(f"  fallback to eager: {why}")
        if entry.kind == "fallback":
            self._cache.put(key, entry)
        else:
            entry.paths = path_of.paths
            path_of.paths.insert(0, entry)
        self.stats.total_compile_time_ms += (time.perf_counter() - start) * 1e3
        self._log.last_key = key
        return _result_of(traced)

    def _outgrown_by_its_call(self, traced: Trace) -> Any:
        """Why the plan of `traced` could not serve even the next call (a MissReason), or None.

        A whole training step's first call creates its optimizer's state (Adam's moments, SGD's
        momentum buffers), and plans are guarded on which state exists: the plan of that call
        would be replaced at the next. Compiling it would cost as much as the plan that serves
        every later call, for nothing, so the first call runs as traced (eagerly) and the next
        one compiles.
        """
        binding = traced.tracer.step_binding
        if binding is None or traced.tracer.graph_break is not None:
            return None
        self._check_static_outputs(traced.tracer, traced.out_leaves)  # its errors belong to this call
        return binding.optimizer_changed()

    def _entry_for(self, key: CacheKey, traced: Trace) -> Any:
        """The cache entry for a trace: a compiled plan, or eager fallback after a graph break."""
        tracer = traced.tracer
        self._check_static_outputs(tracer, traced.out_leaves)
        if tracer.branches and tracer.graph_break is None:
            self._check_branches(traced)
        debug.log_trace(self.__name__, tracer.graph, tracer.graph_break)
        if tracer.graph_break is not None:
            self._warn_once("fallback", f"kiln.compile({self.__name__}): falling back to eager for this "
                                        f"call signature: {tracer.graph_break}")
            self._log.lines.append(f"  fallback to eager: {tracer.graph_break}")
            return FallbackEntry(tracer.graph_break)
        built = build_entry(traced, passes=self.passes, lower=self._lower, backend=self.backend_name)
        self._report_shared_outputs(built.entry.layout.aliases.notes)
        self._pass_logs[key] = built.log
        for _, old in self._latest_logs:
            old.drop_graphs()  # keep the graphs of one compile only: memory stays flat
        self._latest_logs = (("forward", built.log),) + (
            (("backward", built.backward_log),) if built.backward_log is not None else ())
        debug.log_passes(self.__name__, built.log, built.backward_log)
        self._log.lines.append(built.summary)
        if self.show_graph:
            print(built.entry.graph.to_text())
        return built.entry

    def _check_branches(self, traced: Trace) -> None:
        """A trace that took data-dependent branches: explain() lines, or a graph break where its plan
        could not be replayed speculatively (branches.py)."""
        tracer = traced.tracer
        graph, binding = tracer.graph, tracer.step_binding
        user = graph.outputs[:binding.n_user] if binding is not None else graph.outputs
        training = autograd.is_grad_enabled() and any(v.id in graph.requires_grad for v in user)
        problem = branch_problem(graph, binding, training)
        if problem is None:
            self._log.lines.extend(describe_branches(tracer.branches))
            return
        _, _, where = tracer.branches[0]
        tracer.graph_break = (f"data-dependent Python control flow: `bool` on a traced tensor at {where}, in a "
                              f"call whose plan cannot be replayed on a guess of the path: {problem}. Fix: use "
                              "tensor ops (kiln.where, masking) instead of the Python branch, or compute the "
                              "condition outside the compiled function; this call signature now runs eagerly.")
        tracer.branches.clear()

    def _report_notes(self) -> None:
        """What the guards cannot follow: a one-time warning each, or a GraphBreakError with fullgraph."""
        for note in list(self._guards.notes.values()):
            if self.fullgraph:
                raise GraphBreakError(f"kiln.compile({self.__name__}, fullgraph=True): {note.message}")
            self._warn_once(note.tag, f"kiln.compile({self.__name__}): {note.message}")

    def _report_shared_outputs(self, notes: list[str]) -> None:
        """Outputs that share memory in eager but come back from replays as separate tensors."""
        for note in notes:
            message = (f"kiln.compile({self.__name__}): {note}; a compiled call returns them as separate tensors, "
                       "so a write through one is not seen in the other, as it is in eager. Fix: return the "
                       "tensor they view as well, or .clone() them in the function")
            if self.fullgraph:
                raise GraphBreakError(message)
            self._warn_once(f"shared outputs {note}", message)

    def _check_static_outputs(self, tracer: Tracer, out_leaves: list) -> None:
        """A plan returns its non-tensor outputs as traced; an object that may hold tensors or be
        mutated (not an immutable scalar-like value) would come back stale, so it graph-breaks."""
        for x in out_leaves:
            if not isinstance(x, _STATIC_OUTPUTS):
                message = (f"kiln.compile({self.__name__}): the output holds a {type(x).__name__} object, which "
                           "a compiled plan cannot rebuild on later calls (it returns tensors, and Python "
                           "scalars, strings and None, in tuples, lists, dicts, namedtuples and dataclasses). "
                           "Fix: return its tensors in such a container; with fullgraph=False this call "
                           "signature falls back to eager.")
                if self.fullgraph:
                    raise GraphBreakError(message)
                tracer.graph_break = tracer.graph_break or message
                return

    def _warn_once(self, tag: str, message: str, stacklevel: int = 0) -> None:
        """Warn once per tag, pointing at the user's call of the compiled function."""
        warn_once(self._warned, tag, message)

    # ---- introspection ----------------------------------------------------------------
    def explain(self, graphs: bool = False) -> str:
        """Why each miss happened, and each pass with node counts before and after.

        With ``graphs=True`` the text ends with the graphs of the latest compile: the graph
        the passes were given, then the graph after each pass that changed it (forward,
        then backward for a training plan).
        """
        text = self._log.text()
        if not graphs:
            return text
        if not self._latest_logs:
            return text + "\ngraphs of the latest compile: none (nothing compiled yet)"
        parts = [text, "graphs of the latest compile:"]
        for label, log in self._latest_logs:
            parts.append(f"  {label}:")
            parts.append(log.graphs_text(indent="    "))
        return "\n".join(parts)

    def invalidate_cache(self) -> None:
        """Drop every cached plan; the next call traces again."""
        with self._lock:
            self._cache.clear()
            self._pass_logs.clear()
            self._latest_logs = ()
            self.stats.cache_size = 0
            self._log.lines.append("cache invalidated")

    def graphs(self) -> list[Graph]:
        """The optimized forward graphs of the cached plans (most recent last)."""
        return [e.graph for e in self._cache.values() if e.graph is not None]

    @property
    def cache_entries(self) -> list:
        return self._cache.values()

    def __repr__(self) -> str:
        return f"<compiled {self.__name__} ({self.stats.cache_size} plans)>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)


CompiledFunction = JITFunction


def _checked_passes(passes: Any) -> list:
    """The user's extra passes as a list; one pass (a Pipeline too) is a list of one."""
    if callable(passes):
        passes = [passes]
    elif passes is not None and not isinstance(passes, (list, tuple)):
        raise TypeError(f"passes must be a list of passes (callables graph -> graph), got "
                        f"{type(passes).__name__} {passes!r}")
    passes = list(passes or [])
    for p in passes:
        if not callable(p):
            raise TypeError(f"passes must be callables graph -> graph, got {p!r}")
    return passes
