"""Tracing a backward graph from shapes alone: the VJPs' ops recorded, none of them computed.

`differentiate` (autodiff.py) builds the backward graph by calling every primitive's VJP on the
tensors the forward trace saw, while a `BackwardTracer` records. Run concretely, that computes a
whole backward pass (with ones for the cotangents) whose numbers nobody reads: at real sizes a large
part of the first compiled call (ResNet-18 training at B=32 on a Zen 3: 0.7 s of a 3.2 s first call
with warm kernel caches, most of it convolution gradients; a 4-layer d=384 GPT: 1.2 s of 3.7 s).

While an `AbstractEvaluator` is the thread's ``trace_state.lazy``, `bind` hands it each op:

* an op with inputs is recorded into the tracer with its result's shape and dtype from the
  primitive's abstract rule, and returns a tensor whose array is an `Unevaluated` (no elements,
  C-contiguous);
* except where the result's layout depends on its inputs' (`Primitive.result_layout`): a view
  (`Primitive.is_view`), and an op on an input that does not step through memory in C order (NumPy's
  results follow their inputs' layouts), run their kernel, on the real arrays and on uninitialized
  buffers laid out like the `Unevaluated` ones, so that the traced layouts, which the plans expect
  from their first replay, are the ones eager execution makes;
* an op without inputs (``zeros``, ``full``) runs: it reads nothing and costs a fill.

Anything that needs values raises `ValuesNeeded`: NumPy conversion of an `Unevaluated`, any
attribute of one but its layout, an in-place write (which realizes a djit recorder, so it calls
`realize`). `differentiate` then traces again concretely, as it always did, so a VJP that reads
values still gets them, and the graph never depends on values nobody computed.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import from_numpy_dtype
from ..ops.primitive import AbstractValue, Primitive
from ..shaped import Shaped, c_strides
from ..trace_state import trace_state
from .trace import element_strides

_new = object.__new__


class ValuesNeeded(RuntimeError):
    """A backward being traced from shapes alone needed the values of a tensor it did not compute."""


class Unevaluated(Shaped):
    """The array of an op recorded, not computed, while a backward graph is traced from shapes alone: its
    shape, NumPy dtype and byte strides, and no elements."""

    __slots__ = ("shape", "dtype", "strides", "__weakref__")
    __array_ufunc__ = None  # NumPy's ufuncs refuse it instead of reading it

    def __init__(self, shape: tuple, dtype: np.dtype, strides: tuple | None = None) -> None:
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.strides = strides if strides is not None else tuple(s * self.dtype.itemsize for s in c_strides(self.shape))

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise ValuesNeeded(f"the values of an unevaluated {self.dtype}{list(self.shape)} array")

    def __getattr__(self, name: str) -> Any:  # only for attributes not set above
        raise ValuesNeeded(f"{name} of an unevaluated {self.dtype}{list(self.shape)} array")

    def __repr__(self) -> str:
        return f"Unevaluated(shape={self.shape}, dtype={self.dtype})"


def _in_c_order(data: Any) -> bool:
    """Whether `data` (an array or an Unevaluated) steps through memory in C order: the strides of its dims
    that move (size above 1, stride not 0) shrink from the first dim to the last, gaps and reversals allowed.
    NumPy's results on such inputs (elementwise, reductions) come out C-contiguous, as ours do."""
    moving = [abs(s) for n, s in zip(data.shape, data.strides) if n > 1 and s != 0]
    return all(a > b for a, b in zip(moving, moving[1:]))


def _stand_in_array(data: Unevaluated) -> np.ndarray:
    """An ndarray with `data`'s shape, dtype and strides over an uninitialized buffer (untouched pages cost
    nothing), for a view kernel to lay out."""
    itemsize = data.dtype.itemsize
    low = sum(min(0, (n - 1) * s) for n, s in zip(data.shape, data.strides) if n > 0)
    high = sum(max(0, (n - 1) * s) for n, s in zip(data.shape, data.strides) if n > 0) + itemsize
    buffer = np.empty(high - low, np.uint8)
    return np.ndarray(data.shape, data.dtype, buffer=buffer, offset=-low, strides=data.strides)


class AbstractEvaluator:
    """``trace_state.lazy`` while `tracer` records a backward graph from shapes alone (module docstring)."""

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer

    def defer(self, prim: Primitive, inputs: tuple, params: dict) -> Any:
        """The recorded result of ``prim(*inputs, **params)``, or None where `bind` runs it (an op without
        inputs, or a view of real arrays)."""
        if not inputs:
            return None
        device = inputs[0]._device
        unevaluated = False
        for t in inputs:
            if t._device is not device or t._device._xp is not np:
                raise ValuesNeeded(f"{prim.name} on another device than the CPU, or on two devices")
            unevaluated = unevaluated or t._data.__class__ is Unevaluated
        if prim.is_random:
            raise ValuesNeeded(f"{prim.name} draws random numbers")
        if prim.is_view:
            if not unevaluated:
                return None
            if len(inputs) == 1:
                return self._laid_out(prim, inputs, params)
        layout = prim.result_layout
        if layout == "kernel" or (layout == "inputs" and not all(_in_c_order(t._data) for t in inputs)):
            return self._laid_out(prim, inputs, params)
        aval = prim.abstract(*[AbstractValue(tuple(t._data.shape), from_numpy_dtype(t._data.dtype))
                               for t in inputs], **params)
        return self._record(prim, inputs, params, Unevaluated(tuple(aval.shape), aval.dtype.np))

    def _laid_out(self, prim: Primitive, inputs: tuple, params: dict) -> Any:
        """The result of a view, or of an op on an input not laid out in C order, laid out as the
        kernel lays it out (NumPy's results follow their inputs' layouts): the kernel runs on the real arrays
        and on arrays of the unevaluated ones' layouts over uninitialized memory. Integer inputs that were not
        computed may be indices, which such memory would not hold: they need values."""
        arrays = []
        for t in inputs:
            data = t._data
            if data.__class__ is Unevaluated:
                if data.dtype.kind not in "fc":
                    raise ValuesNeeded(f"{prim.name} on an unevaluated {data.dtype} array laid out out of C order")
                data = _stand_in_array(data)
            arrays.append(data)
        made = np.asarray(prim.kernel(np, *arrays, **params))
        base = None
        if prim.is_view and np.may_share_memory(made, arrays[0]):
            source = inputs[0]
            base = source._base if source._base is not None else source
        out = self._record(prim, inputs, params, Unevaluated(made.shape, made.dtype, made.strides), base)
        found = element_strides(made, self.tracer.env[id(out)].shape)
        if found is not None:
            self.tracer.strides[self.tracer.env[id(out)].id] = found
        return out

    def _record(self, prim: Primitive, inputs: tuple, params: dict, data: Unevaluated, base: Any = None) -> Any:
        out = _new(type(inputs[0]))
        out._data = data
        out._device = inputs[0]._device
        out._base = base
        self.tracer.record(prim, inputs, params, out)
        return out

    def realize(self) -> None:
        """Called where values must exist from here on (an in-place write): they do not."""
        raise ValuesNeeded("an in-place write")

    def realize_inputs(self, inputs: tuple) -> None:
        if any(t._data.__class__ is Unevaluated for t in inputs):
            raise ValuesNeeded("an op that runs on values")


class shapes_only:
    """``with shapes_only(tracer):`` ops are recorded into `tracer` from shapes alone (module docstring)."""

    def __init__(self, tracer: Any) -> None:
        self.evaluator = AbstractEvaluator(tracer)

    def __enter__(self) -> AbstractEvaluator:
        if trace_state.lazy is not None:
            raise ValuesNeeded("a djit recorder is active")
        trace_state.lazy = self.evaluator
        return self.evaluator

    def __exit__(self, *exc: object) -> None:
        trace_state.lazy = None
