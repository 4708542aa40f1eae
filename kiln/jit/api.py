"""The public JIT API: kiln.compile, JITFunction (= CompiledFunction), JITModule, jit, djit, xpr.

Life of a call: flatten the arguments into leaves, build a `CacheKey`, and on a
hit replay the cached plan. On a miss, trace the real function (its results are
this call's results), differentiate the graph if gradients are needed, run the
pass pipeline, lower to a Plan and cache it.
"""
from __future__ import annotations

import enum
import functools
import inspect
import threading
import time
import warnings
from typing import Any, Callable

import numpy as np

from .. import autograd
from ..device import Device, cuda_is_available
from ..dtypes import DType
from ..ops.primitive import trace_state
from ..tensor import Tensor
from .autodiff import differentiate
from .backends import get_backend
from .cache import CacheKey, CompilationStats, PlanCache, changed_dims, describe_difference
from .executor import FallbackEntry, InferenceEntry, OutputLayout, TrainingEntry
from .guards import ByIdentity, Guards
from .ir import Graph, InputSpec
from .passes import DeadNodeElim, NoGradStrip, PassLog, Pipeline, inference_pipeline, logging_passes, \
    run_pass, training_pipeline
from . import debug
from .pytree import flatten
from .symbolic import guards_hold, unique_guards
from .trace import GraphBreakError, Tracer, dynamic_key_dim, symbolic_shape


def _validate_dynamic_dims(spec: Any) -> dict[int, dict[int, str]]:
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise ValueError(f"dynamic_dims must be a dict like {{0: {{0: 'batch'}}}}, got {type(spec).__name__}")
    out: dict[int, dict[int, str]] = {}
    for arg, dims in spec.items():
        if not isinstance(arg, int) or arg < 0:
            raise ValueError(f"dynamic_dims keys must be non-negative argument indices, got {arg!r}")
        if not isinstance(dims, dict):
            raise ValueError(f"dynamic_dims[{arg}] must be a dict {{dim: 'name'}}, got {type(dims).__name__}")
        for d, name in dims.items():
            if not isinstance(d, int) or not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"dynamic_dims[{arg}] must map dim indices to identifier names, got {d!r}: {name!r}")
        out[arg] = dict(dims)
    return out


def _static_key(x: Any) -> Any:
    if isinstance(x, float):
        return ("float", repr(x))
    if type(x) is np.ndarray:  # its values are baked into the plan: key them all (an id can be reused,
        return ("ndarray", x.shape, x.dtype.str, x.tobytes())  # and repr elides the middle of big arrays)
    try:
        hash(x)
        return (type(x).__name__, x)
    except TypeError:  # an unknown container: its identity (held, so the id is not reused) and contents
        return (type(x).__name__, ByIdentity(x), repr(x))


_SCALARS = (int, float, bool, str, type(None))
_STATIC_OUTPUTS = (Tensor, int, float, bool, str, bytes, complex, type(None), type(Ellipsis), slice, range, type,
                   frozenset, enum.Enum, np.generic, DType, Device)  # outputs a plan may return as traced
_LOG_LIMIT = 100  # explain() history lines and stats.miss_reasons kept (older ones are dropped)


def _captured_unchanged(entry: Any) -> bool:
    """A plan differentiates exactly the outside tensors that required grad when it was traced."""
    for tensor, requires_grad in getattr(entry, "captured", ()):
        if tensor.requires_grad != requires_grad:
            return False
    return True


def _reusable(entry: Any, dims: dict | None) -> bool:
    """The entry fits this call: captured tensors as traced, and (dynamic_dims) the Python
    branches taken on symbolic sizes while tracing go the same way for this call's sizes."""
    guards = getattr(entry, "shape_guards", None)
    return _captured_unchanged(entry) and (not guards or guards_hold(guards, dims))


class JITFunction:
    """A compiled callable: traces on a miss, replays the cached plan on a hit.

    >>> @kiln.compile
    ... def f(x):
    ...     return (x * 2).relu().sum()
    >>> f(kiln.randn(4)); f.stats.misses
    1
    """

    def __init__(self, fn: Callable, *, fullgraph: bool = False, max_cache_entries: int | None = None,
                 max_cache_size: int | None = None, eviction: str = "lru", dynamic_dims: Any = None,
                 backend: str = "auto", passes: list | None = None, show_graph: bool = False):
        if not callable(fn):
            raise TypeError(f"kiln.compile() expects an nn.Module or a callable, got {type(fn)}")
        functools.update_wrapper(self, fn, updated=())
        if "__name__" not in self.__dict__:  # a callable object or a partial: name it by its type
            self.__name__ = self.__qualname__ = type(fn).__name__
        self._fn = fn
        self.fullgraph = fullgraph
        if max_cache_entries is not None and max_cache_size is not None and max_cache_entries != max_cache_size:
            raise ValueError("pass max_cache_entries or its alias max_cache_size, not both")
        if not isinstance(fullgraph, bool):
            raise TypeError(f"fullgraph must be True or False, got {fullgraph!r}")
        size = max_cache_entries if max_cache_entries is not None else (
            max_cache_size if max_cache_size is not None else 8)
        self._cache = PlanCache(size, eviction)
        self.dynamic_dims = _validate_dynamic_dims(dynamic_dims)
        self.backend_name, self._lower = get_backend(backend)
        if callable(passes):  # one pass (a Pipeline too) is a list of one
            passes = [passes]
        elif passes is not None and not isinstance(passes, (list, tuple)):
            raise TypeError(f"passes must be a list of passes (callables graph -> graph), got "
                            f"{type(passes).__name__} {passes!r}")
        self.passes = list(passes or [])
        for p in self.passes:
            if not callable(p):
                raise TypeError(f"passes must be callables graph -> graph, got {p!r}")
        self.show_graph = show_graph
        self.stats = CompilationStats()
        self._lock = threading.RLock()
        self._history: list[str] = []  # explain()'s lines, the newest _LOG_LIMIT to 2 * _LOG_LIMIT of them
        self._history_dropped = 0
        self._pass_logs: dict[CacheKey, PassLog] = {}
        self._last_key: CacheKey | None = None
        self._dim_misses: dict[tuple[int, int], int] = {}
        self._warned: set[str] = set()
        self._guards = Guards(fn)  # closure, global, attribute and default values the plans baked in
        self._positional_treedefs: dict[int, Any] = {}

    # ---- the call path --------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if trace_state.tracer is not None:  # inside another trace: inline, so the outer graph sees it
            return self._call_eager(args, kwargs)
        leaves, treedef = self._flatten_call(args, kwargs)
        key, dims = self._make_key(args, kwargs, leaves, treedef)
        entry = self._cache.get(key)
        if entry is not None and _reusable(entry, dims):
            return self._run_cached(entry, args, kwargs, leaves, dims)
        return self._compile_and_run(key, dims, args, kwargs, leaves, treedef)

    def _run_cached(self, entry: Any, args: tuple, kwargs: dict, leaves: list, dims: dict | None) -> Any:
        if entry.kind == "fallback":
            with self._lock:
                self.stats.fallbacks += 1
            return self._call_eager(args, kwargs)
        start = time.perf_counter()
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
        return self._fn(*args, **kwargs)

    def _module_key(self) -> tuple:
        return ()

    def _extra_inputs(self, tracer: Tracer) -> None:
        """Register module params and buffers (JITModule); plain functions have none."""

    def _make_key(self, args: tuple, kwargs: dict, leaves: list, treedef: Any) -> tuple[CacheKey, dict | None]:
        dyn_leaves = self._dynamic_leaves(args, kwargs) if self.dynamic_dims else {}
        statics = []
        tensors = []
        aliasing = []
        seen: dict[int, int] = {}
        owners: dict[int, int] = {}  # id(memory owner) -> first leaf whose memory it holds
        dims: dict[str, int] | None = {} if dyn_leaves else None
        for i, x in enumerate(leaves):
            if isinstance(x, Tensor):
                shape = x._data.shape
                dyn = dyn_leaves.get(i)
                if dyn:
                    for d, name in dyn.items():
                        if d >= len(shape):
                            raise ValueError(f"dynamic_dims names dim {d} of argument {self._arg_of_leaf(args, i)}, "
                                             f"which has shape {tuple(shape)}")
                        dims[name] = shape[d]  # type: ignore[index]
                    shape = tuple(dyn[d] if d in dyn and dynamic_key_dim(s) else s for d, s in enumerate(shape))
                tensors.append((i, shape, x._data.dtype.str, str(x._device), x.requires_grad))
                owner = x._base if x._base is not None else x  # views of one tensor share memory
                aliasing.append((seen.setdefault(id(x), i), owners.setdefault(id(owner), i)))
            else:
                statics.append(_static_key(x))
        guards = self._guards.key(args, kwargs)
        if guards is not None:
            statics.append(guards)
        key = CacheKey(treedef, tuple(statics), tuple(tensors), tuple(aliasing),
                       autograd._state.enabled, self._module_key(), self.backend_name)
        return key, dims

    def _dynamic_leaves(self, args: tuple, kwargs: dict) -> dict[int, dict[int, str]]:
        """Leaf index -> {dim: name} for the tensors dynamic_dims names (positionally or by keyword)."""
        out: dict[int, dict[int, str]] = {}
        offset = 0
        for index, arg in enumerate(args):
            n = len(flatten(arg)[0])
            if index in self.dynamic_dims:
                if not isinstance(arg, Tensor):
                    raise ValueError(f"dynamic_dims names argument {index}, which is a "
                                     f"{type(arg).__name__}, not a Tensor")
                out[offset] = self.dynamic_dims[index]
            offset += n
        missing = [index for index in self.dynamic_dims if index >= len(args)]
        if not missing:
            return out
        names = self._positional_names()
        where: dict[str, tuple[int, Any]] = {}  # keyword -> (its first leaf, its value)
        for name, value in kwargs.items():
            where[name] = (offset, value)
            offset += len(flatten(value)[0])
        for index in missing:
            if index >= len(names):
                raise ValueError(f"dynamic_dims names argument {index}, but the function was called with "
                                 f"{len(args)} positional argument(s)")
            if names[index] not in where:
                continue  # not passed: the call reports the missing argument (or uses the default)
            leaf, value = where[names[index]]
            if not isinstance(value, Tensor):
                raise ValueError(f"dynamic_dims names argument {index} ({names[index]!r}), which is a "
                                 f"{type(value).__name__}, not a Tensor")
            out[leaf] = self.dynamic_dims[index]
        return out

    def _positional_names(self) -> list[str]:
        """Names of the parameters that can be passed by position or by keyword, in order."""
        try:
            params = inspect.signature(self._fn).parameters.values()
        except (TypeError, ValueError):  # no signature to read: only positional use is understood
            return []
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        names = []
        for p in params:
            if p.kind not in kinds:
                break
            names.append(p.name if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD else "")
        return names

    @staticmethod
    def _arg_of_leaf(args: tuple, leaf: int) -> int:
        offset = 0
        for index, arg in enumerate(args):
            offset += len(flatten(arg)[0])
            if leaf < offset:
                return index
        return -1

    # ---- compiling ------------------------------------------------------------------
    def _compile_and_run(self, key: CacheKey, dims: dict | None, args: tuple, kwargs: dict,
                         leaves: list, treedef: Any) -> Any:
        with self._lock:
            if self._guards.refresh(args, kwargs):  # the guarded reads changed: key them afresh
                key, dims = self._make_key(args, kwargs, leaves, treedef)
            entry = self._cache.get(key)
            if entry is not None and _reusable(entry, dims):  # another thread compiled it meanwhile
                return self._run_cached(entry, args, kwargs, leaves, dims)
            replacing = entry is not None  # its captured tensors' requires_grad or its shape guards changed
            start = time.perf_counter()
            n_reasons, n_history = len(self.stats.miss_reasons), len(self._history)
            try:
                self._note_miss(key, args)
                tracer = Tracer(self.fullgraph)
                dyn_leaves = self._dynamic_leaves(args, kwargs) if self.dynamic_dims else {}
                leaf_of_tensor: dict[int, int] = {}
                for i, x in enumerate(leaves):
                    if isinstance(x, Tensor) and id(x) not in leaf_of_tensor:
                        leaf_of_tensor[id(x)] = i
                        shape = symbolic_shape(x._data.shape, dyn_leaves[i]) if i in dyn_leaves else None
                        tracer.add_input(x, InputSpec("arg", i), shape=shape)
                self._extra_inputs(tracer)
                self.stats.traces += 1
                with tracer:
                    result = self._trace_target(args, kwargs)
                out_leaves, out_treedef = flatten(result)
                out_tensors = [t for t in out_leaves if isinstance(t, Tensor)]
                tracer.set_outputs(out_tensors)
                self._check_static_outputs(tracer, out_leaves)
                debug.log_trace(self.__name__, tracer.graph, tracer.graph_break)
                if tracer.graph_break is not None:
                    entry: Any = FallbackEntry(tracer.graph_break)
                    self._warn_once("fallback", f"kiln.compile({self.__name__}): falling back to eager for this "
                                                f"call signature: {tracer.graph_break}")
                    self._history.append(f"  fallback to eager: {tracer.graph_break}")
                else:
                    entry = self._build_entry(key, tracer, out_leaves, out_treedef, leaf_of_tensor)
                    entry.captured = tuple((spec.ref, spec.ref.requires_grad) for spec in tracer.graph.specs
                                           if spec.kind == "captured")
            except BaseException:  # an error or a KeyboardInterrupt: no entry, and no miss recorded
                del self.stats.miss_reasons[n_reasons:]
                del self._history[n_history:]
                self._pass_logs.pop(key, None)
                raise
            self.stats.misses += 1
            self.stats.evictions += replacing
            for old in self._cache.put(key, entry):
                self.stats.evictions += 1
                self._pass_logs.pop(old, None)
            self.stats.cache_size = len(self._cache)
            self._trim_logs()
            self.stats.total_compile_time_ms += (time.perf_counter() - start) * 1e3
            self._last_key = key
            return result

    def _trace_target(self, args: tuple, kwargs: dict) -> Any:
        return self._fn(*args, **kwargs)

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

    def _build_entry(self, key: CacheKey, tracer: Tracer, out_leaves: list, out_treedef: Any,
                     leaf_of_tensor: dict[int, int]) -> Any:
        graph = tracer.graph
        positions = [i for i, x in enumerate(out_leaves) if isinstance(x, Tensor)]
        statics = {i: x for i, x in enumerate(out_leaves) if not isinstance(x, Tensor)}
        arg_alias = {k: leaf_of_tensor[id(out_leaves[pos])] for k, pos in enumerate(positions)
                     if id(out_leaves[pos]) in leaf_of_tensor}
        layout = OutputLayout(out_treedef, positions, statics, arg_alias)
        device = out_leaves[positions[0]].device if positions else None
        log, backward_log = PassLog(), PassLog()
        training = autograd.is_grad_enabled() and any(v.id in graph.requires_grad for v in graph.outputs)
        if training:
            diff = differentiate(graph, tracer.real, tracer.symbolic)
            with logging_passes(log):
                forward = run_pass(training_pipeline(self.passes), diff.forward)
            with logging_passes(backward_log):
                backward = run_pass(training_pipeline(self.passes), diff.backward)
            requires = [v.id in graph.requires_grad for v in graph.outputs]
            entry: Any = TrainingEntry(forward, self._lower(forward), backward, self._lower(backward),
                                       diff.n_outputs, diff.cotangent_outputs, diff.grad_inputs, requires,
                                       layout, device)
        else:
            with logging_passes(log):
                forward = run_pass(inference_pipeline(self.passes), graph)
            entry = InferenceEntry(forward, self._lower(forward), layout, device)
        entry.shape_guards = unique_guards(tracer.shape_guards + (diff.shape_guards if training else []))
        self._pass_logs[key] = log
        debug.log_passes(self.__name__, log, backward_log if training else None)
        article = "an" if entry.kind == "inference" else "a"
        text = (f"  compiled {article} {entry.kind} plan ({self.backend_name}): {len(graph.nodes)} traced nodes -> "
                f"{len(entry.graph.nodes)} forward nodes\n  forward passes:\n{log}")
        if training:
            text += f"\n  backward passes ({len(diff.backward.nodes)} -> {len(entry.backward_graph.nodes)} nodes):\n{backward_log}"
        self._history.append(text)
        if self.show_graph:
            print(entry.graph.to_text())
        return entry

    def _note_miss(self, key: CacheKey, args: tuple) -> None:
        keys = self._cache.keys()
        reference = None
        if keys:
            reference = min(keys, key=lambda k: len(describe_difference(key, k)))
        elif self._last_key is not None:
            reference = self._last_key
        if reference is None:
            reasons = ["first call"]
        else:
            reasons = describe_difference(key, reference)
            for leaf, dim in changed_dims(key, reference):
                count = self._dim_misses.get((leaf, dim), 0) + 1
                self._dim_misses[(leaf, dim)] = count
                if count >= self._cache.max_entries:
                    arg = self._arg_of_leaf(args, leaf)
                    self._warn_once(f"dim{leaf}.{dim}", (
                        f"kiln.compile({self.__name__}) has recompiled {count + 1} times because dimension "
                        f"{dim} of argument {arg} keeps changing. Mark it dynamic to share one plan: "
                        f"dynamic_dims={{{arg}: {{{dim}: 'n'}}}}"), stacklevel=5)
            guarded = self._guards.describe(key.statics, reference.statics)
            if guarded:  # name the Python values that changed instead of printing the raw key
                reasons = [r for r in reasons if not r.startswith("statics:")] + guarded
                self._note_guard_misses(guarded)
        self.stats.miss_reasons.append(reasons)
        debug.log_miss(self.__name__, self.stats.misses + 1, reasons)
        self._history.append(f"miss #{self.stats.misses + 1}: " + "; ".join(reasons))

    def _note_guard_misses(self, reasons: list[str]) -> None:
        """Warn when one Python value keeps changing: each change recompiles, so it belongs in a tensor."""
        for reason in reasons:
            if not reason.startswith("`"):
                continue
            name = reason[1:reason.index("`", 1)]
            count = self._dim_misses.get(name, 0) + 1  # type: ignore[call-overload]
            self._dim_misses[name] = count  # type: ignore[index]
            if count >= self._cache.max_entries:
                self._warn_once(f"guard {name}", (
                    f"kiln.compile({self.__name__}) has recompiled {count + 1} times because `{name}` keeps "
                    "changing: every plan bakes in the value it saw. Pass it as a tensor argument (or read it "
                    "from a tensor) to share one plan."), stacklevel=6)

    def _warn_once(self, tag: str, message: str, stacklevel: int = 4) -> None:
        """Warn once per tag, pointing at the user's call of the compiled function."""
        if tag not in self._warned:
            self._warned.add(tag)
            warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)

    def _trim_logs(self) -> None:
        """Keep the newest _LOG_LIMIT history lines and miss reasons, so a long run's memory stays flat."""
        if len(self._history) > 2 * _LOG_LIMIT:
            dropped = len(self._history) - _LOG_LIMIT
            del self._history[:dropped]
            self._history_dropped += dropped
        if len(self.stats.miss_reasons) > 2 * _LOG_LIMIT:
            del self.stats.miss_reasons[:len(self.stats.miss_reasons) - _LOG_LIMIT]

    # ---- introspection ----------------------------------------------------------------
    def explain(self) -> str:
        """Why each miss happened, and each pass with node counts before and after."""
        lines = [f"{self.__name__}: {self.stats!r}"]
        if self._history_dropped:
            lines.append(f"({self._history_dropped} older lines dropped)")
        lines.extend(self._history)
        return "\n".join(lines)

    def invalidate_cache(self) -> None:
        """Drop every cached plan; the next call traces again."""
        with self._lock:
            self._cache.clear()
            self._pass_logs.clear()
            self.stats.cache_size = 0
            self._history.append("cache invalidated")

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


class JITModule(JITFunction):
    """A compiled nn.Module: params and buffers are read fresh each call; hooks run around the plan."""

    def __init__(self, module: Any, **kwargs: Any):
        object.__setattr__(self, "_module", module)
        super().__init__(module.forward, **kwargs)
        self._guards = Guards(module.forward, covered=module)  # the module tree is keyed by _module_key
        self.__name__ = type(module).__name__
        self._initialized = True  # from now on, new public attributes are the module's

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module = self._module
        if trace_state.tracer is not None:
            return module(*args, **kwargs)
        if module._forward_pre_hooks:
            args, kwargs = module._run_forward_pre_hooks(args, kwargs)
        out = super().__call__(*args, **kwargs)
        if module._forward_hooks:
            out = module._run_forward_hooks(args, kwargs, out)
        return out

    def _call_eager(self, args: tuple, kwargs: dict) -> Any:
        return self._module.forward(*args, **kwargs)

    def _trace_target(self, args: tuple, kwargs: dict) -> Any:
        return self._module.forward(*args, **kwargs)

    def _module_key(self) -> tuple:
        """(structure version, training flags and plain attributes, param requires_grad flags).

        The tree walk reruns only when some module changed (MutationEpoch moved); the
        parameters' requires_grad flags are read on every call.
        """
        from ..nn.module import MutationEpoch  # noqa: PLC0415

        cached = self.__dict__.get("_module_key_cache")
        if cached is None or cached[0] != MutationEpoch.value:
            version, training, attributes = self._walk_module()
            params = [p for p in self._module.parameters()]
            cached = (MutationEpoch.value, version, training, attributes, params)
            object.__setattr__(self, "_module_key_cache", cached)
        return (cached[1], cached[2], cached[3], tuple([p.requires_grad for p in cached[4]]))

    def _walk_module(self) -> tuple[int, tuple, tuple]:
        """(newest structure stamp, training flags, plain scalar attributes by dotted name)."""
        version = 0
        training: list = []
        attributes: list = []
        stack = [("", self._module)]
        while stack:
            path, m = stack.pop()
            if m._structure_version > version:
                version = m._structure_version
            training.append(m.training)
            for name, value in m.__dict__.items():  # plain Python attributes the forward may read
                if not name.startswith("_") and name != "training" and isinstance(value, _SCALARS):
                    attributes.append((path + name, _static_key(value)))
            stack.extend((f"{path}{n}.", c) for n, c in m._modules.items() if c is not None)
        return version, tuple(training), tuple(attributes)

    def _extra_inputs(self, tracer: Tracer) -> None:
        for name, p in self._module.named_parameters():
            if id(p) not in tracer.env:
                tracer.add_input(p, InputSpec("param", p, name=name))
        for name, b in self._module.named_buffers():
            if id(b) not in tracer.env:
                tracer.add_input(b, InputSpec("buffer", b, name=name))

    # ---- delegation to the wrapped module -----------------------------------------------
    @property
    def module(self) -> Any:
        return self._module

    def __getattr__(self, name: str) -> Any:
        module = self.__dict__.get("_module")
        if module is None:
            raise AttributeError(name)
        value = getattr(module, name)
        if callable(value) and getattr(value, "__self__", None) is module:
            return self._keep_wrapped(value)
        return value

    def _keep_wrapped(self, method: Callable) -> Callable:
        """A module method that returns the module (to, float, requires_grad_...) returns this JITModule."""
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            return self if result is self._module else result

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_") or name in type(self).__dict__ or name in JITFunction.__dict__ \
                or name in self.__dict__ or "_initialized" not in self.__dict__:
            object.__setattr__(self, name, value)
        else:
            setattr(self._module, name, value)

    def train(self, mode: bool = True) -> "JITModule":
        self._module.train(mode)
        return self

    def eval(self) -> "JITModule":
        self._module.eval()
        return self

    def __repr__(self) -> str:
        return f"JITModule({self._module!r})"


def compile(target: Any = None, *, fullgraph: bool = False, max_cache_entries: int | None = None,  # noqa: A001
            max_cache_size: int | None = None, eviction: str = "lru", dynamic_dims: Any = None,
            backend: str = "auto", passes: list | None = None) -> Any:
    """Compile an nn.Module (-> JITModule) or a callable (-> JITFunction).

    >>> model = kiln.compile(kiln.models.mlp())
    >>> fast_fn = kiln.compile(fn, dynamic_dims={0: {0: "B"}})

    Without a target, returns a decorator.
    """
    options = dict(fullgraph=fullgraph, max_cache_entries=max_cache_entries, max_cache_size=max_cache_size,
                   eviction=eviction, dynamic_dims=dynamic_dims, backend=backend, passes=passes)
    if target is None:
        return lambda fn: compile(fn, **options)
    from ..nn.module import Module  # noqa: PLC0415

    if isinstance(target, Module):
        return JITModule(target, **options)
    if isinstance(target, type) and issubclass(target, Module):
        raise TypeError(f"kiln.compile() expects an nn.Module instance, got the class {target.__name__}; "
                        f"create the module first: kiln.compile({target.__name__}(...))")
    if callable(target) and not isinstance(target, (int, float, str, bytes, Tensor)):
        return JITFunction(target, **options)
    raise TypeError(f"kiln.compile() expects an nn.Module or a callable, got {type(target)}")


def _to_accelerator(args: tuple) -> tuple:
    if not cuda_is_available():
        return args
    return tuple(a.to("cuda") if isinstance(a, Tensor) and a.device.type == "cpu" else a for a in args)


class DynamicJITFunction(JITFunction):
    """djit: retrace on every call (data-dependent Python works) and reuse plans by graph structure."""

    def __init__(self, fn: Callable, show_graph: bool = False, auto_device: bool = True):
        super().__init__(fn, show_graph=show_graph)
        self.auto_device = auto_device
        self._plans: dict[int, Any] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.auto_device:
            args = _to_accelerator(args)
        if trace_state.tracer is not None:
            return self._fn(*args, **kwargs)
        start = time.perf_counter()
        leaves, _ = flatten((args, kwargs))
        tracer = Tracer(fullgraph=False)
        for i, x in enumerate(leaves):
            if isinstance(x, Tensor) and id(x) not in tracer.env:
                tracer.add_input(x, InputSpec("arg", i))
        with tracer:
            result = self._fn(*args, **kwargs)
        tracer.set_outputs([t for t in flatten(result)[0] if isinstance(t, Tensor)])
        with self._lock:
            self.stats.traces += 1
            debug.log_trace(self.__name__, tracer.graph)
            graph = run_pass(Pipeline([NoGradStrip(), DeadNodeElim()]), tracer.graph)
            h = graph.structure_hash()
            if h in self._plans:
                self.stats.hits += 1
            else:
                self.stats.misses += 1
                debug.log_miss(self.__name__, self.stats.misses, ["new graph structure"])
                self._plans[h] = self._lower(run_pass(inference_pipeline(), graph))
                if self.show_graph:
                    print(graph.to_text())
                self.stats.cache_size = len(self._plans)
            self.stats.total_compile_time_ms += (time.perf_counter() - start) * 1e3
        return result


class StaticJITFunction(JITFunction):
    """jit(static=True): kiln.compile plus optional accelerator placement of inputs."""

    def __init__(self, fn: Callable, show_graph: bool = False, auto_device: bool = True):
        super().__init__(fn, show_graph=show_graph)
        self.auto_device = auto_device

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.auto_device:
            args = _to_accelerator(args)
        return super().__call__(*args, **kwargs)


def jit(func: Callable | None = None, *, static: bool = True, show_graph: bool = False,
        auto_device: bool = True) -> Any:
    """JIT-compile a function; usable as ``jit(f)`` or ``@jit`` / ``@jit(static=False)``."""
    def wrap(fn: Callable) -> Any:
        if not callable(fn):
            raise TypeError(f"kiln.jit() expects a callable, got {type(fn)}")
        if static:
            return StaticJITFunction(fn, show_graph=show_graph, auto_device=auto_device)
        return DynamicJITFunction(fn, show_graph=show_graph, auto_device=auto_device)

    return wrap if func is None else wrap(func)


def djit(func: Callable | None = None, *, show_graph: bool = False, auto_device: bool = True) -> Any:
    """Dynamic JIT: retraces every call, reusing compiled plans by graph-structure hash."""
    return jit(func, static=False, show_graph=show_graph, auto_device=auto_device)


def trace_graph(fn: Callable, *args: Any, **kwargs: Any) -> Graph:
    """Trace fn on example arguments and return its graph (no-grad, dead nodes removed)."""
    leaves, _ = flatten((args, kwargs))
    tracer = Tracer(fullgraph=False)
    for i, x in enumerate(leaves):
        if isinstance(x, Tensor) and id(x) not in tracer.env:
            tracer.add_input(x, InputSpec("arg", i))
    with tracer, autograd.no_grad():
        result = fn(*args, **kwargs)
    tracer.set_outputs([t for t in flatten(result)[0] if isinstance(t, Tensor)])
    return run_pass(Pipeline([NoGradStrip(), DeadNodeElim()]), tracer.graph)


def xpr(fn: Callable, *primals: Any) -> str:
    """The xpr text (JAX-like) of fn's graph on example inputs `primals`."""
    return trace_graph(fn, *primals).to_text()
