"""The primitive contract and `bind`, the one door every computation goes through.

A `Primitive` states in one place:
  1. `abstract`: the shape and dtype rule (`AbstractValue`s in, one out);
  2. `kernel`: the array computation, generic over the array module `xp`;
  3. `vjp`: the vector-Jacobian product, written in kiln ops;
  4. `c_expr`: for an elementwise primitive the C renderer's table does not spell
     (kiln/jit/backends/render), its own C expression template, so it fuses too;
  5. its capabilities, which the compiler's passes and backends ask instead of its name:
     `fuses`, `transcendental`, `broadcast`, `reduction`, `identity`, `indexed`, `is_view`, `view_strides`.

`bind` runs the kernel, records an autograd `Node` when needed, and reports the
call to the active tracer (see kiln.jit), so eager, autograd and the compiler
all share these definitions.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import numpy as np

from .. import autograd
from ..autograd import Node
from ..device import check_same_device
from ..dtypes import DType
from ..trace_state import trace_state
from ..unread_inputs import ShapeOnly
from .quiet import quiet

if TYPE_CHECKING:
    from ..tensor import Tensor


class ShapeError(ValueError):
    """Operand shapes do not fit an op. The message names the op and the shapes."""


class AbstractValue(NamedTuple):
    """What the compiler knows about a value: its shape (ints or symbols) and dtype."""

    shape: tuple
    dtype: DType

    def __repr__(self) -> str:
        return f"{self.dtype.name}{list(self.shape)}"


REGISTRY: dict[str, "Primitive"] = {}


class Reduction(NamedTuple):
    """How a reduction primitive folds values together (`Primitive.reduction`)."""

    combine: str  # the elementwise primitive that folds two values into one ("add", "maximum")
    order: str  # "pairwise": NumPy's pairwise order, which the bits depend on; "any": exact in any order


class Primitive:
    """Base class of every primitive. Subclasses set `name` and override the rules."""

    name: str = "?"
    saves_inputs: tuple[int, ...] = ()  # inputs the VJP reads: version-checked at backward
    saves_output: bool = False  # the VJP reads the output (via node.output())
    narrows_saves: bool = False  # the class overrides saved_inputs (set by __init_subclass__; Node asks only then)
    is_view: bool = False  # the output may share memory with input 0
    is_random: bool = False  # consumes random numbers (kiln.random)
    is_check: bool = False  # a runtime check (kiln/ops/checks.py): raises on bad data; passes keep it
    result_layout: str = "inputs"  # how the kernel lays its result out: "inputs", in C order where the inputs
    # step through memory in C order (NumPy's ufuncs and reductions); "c", always in C order; "kernel", only running
    # it tells (a backward traced from shapes alone, kiln/jit/abstract_backward.py, runs it otherwise)
    c_expr: str | None = None  # C template of an elementwise op unknown to the renderer's table ({0}, {1}, ...)
    # capabilities (the compiler asks these, never the name):
    fuses: bool = False  # elementwise, and its C spelling computes the kernel's bits: fused kernels may hold it
    transcendental: bool = False  # its C spelling (kiln's vector math) is within an ulp bound: fused in float32 only
    broadcast: bool = False  # reads input 0 at a broadcast index (expand): fused kernels read it through an index form
    reduction: Reduction | None = None  # a reduction over params["axes"], and how it folds values
    identity: bool = False  # value-preserving: the output holds input 0's values in C order (reshape, detach)
    # reads or writes along an axis at int64 indices (input 1): "gather" reads input 0 there; "scatter_add" adds
    # input 2 there into a copy of input 0
    indexed: str | None = None
    # a view whose result reads input 0's memory at static strides: a method giving, from input 0's (shape, element
    # strides, element offset) and the params, the result's, or None where the kernel copies (ops/strided_views.py)
    view_strides: Callable[..., tuple[tuple, tuple, int] | None] | None = None

    def saved_inputs(self, inputs: tuple) -> tuple[int, ...]:
        """The inputs whose values the VJP reads for this call (`saves_inputs`; a primitive whose VJP reads an
        input only for another input's gradient narrows it to the inputs that require grad)."""
        return self.saves_inputs

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.narrows_saves = cls.saved_inputs is not Primitive.saved_inputs
        if "kernel" in cls.__dict__:  # inf/NaN results come back without NumPy's RuntimeWarnings (ops/quiet.py)
            cls.kernel = quiet(cls.__dict__["kernel"])  # type: ignore[method-assign]
        if cls.name != "?":
            REGISTRY[cls.name] = cls()  # one instance per primitive

    def abstract(self, *avals: AbstractValue, **params: Any) -> AbstractValue:
        raise NotImplementedError(f"{self.name}: no abstract rule")

    def kernel(self, xp: Any, *arrays: Any, **params: Any) -> Any:
        raise NotImplementedError(f"{self.name}: no kernel")

    def vjp(self, g: Tensor, inputs: tuple, node: Node, **params: Any) -> tuple:
        raise RuntimeError(f"{self.name} is not differentiable")

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"




def _kernel_failed(prim: Primitive, inputs: tuple, params: dict, exc: Exception) -> Exception:
    """Turn a kernel's low-level error into a ShapeError from the abstract rule, when it has one."""
    avals = [AbstractValue(tuple(t._data.shape), t.dtype) for t in inputs]
    try:
        prim.abstract(*avals, **params)
    except (ShapeError, TypeError, IndexError) as err:
        return err
    except Exception:  # noqa: BLE001 - the rule itself could not judge; keep the kernel's error
        pass
    return exc


_Tensor: Any = None  # kiln.tensor.Tensor, installed by kiln/tensor.py (an import here would cycle)
_new = object.__new__
_ndarray = np.ndarray
_grad_state = autograd._state


def array_vjp(g: Any) -> bool:
    """Whether a VJP may compute its gradient from `g`'s array with NumPy instead of kiln ops:
    no graph is being built (create_graph), nothing is tracing, and the data is a NumPy array."""
    return not _grad_state.enabled and trace_state.tracer is None and g._data.__class__ is _ndarray


def _raise_kernel_error(prim: Primitive, inputs: tuple, params: dict, exc: Exception) -> None:
    for t in inputs:
        if t._data.__class__ is ShapeOnly:  # a VJP computed with an input its primitive does not save
            raise t._data.refusal() from exc
    err = _kernel_failed(prim, inputs, params, exc)
    if err is exc:
        raise exc
    raise err from None


def _mark_view(prim: Primitive, inputs: tuple, data: Any, out: Any, device: Any) -> None:
    """Share the version counter with input 0 only when `data` really shares its memory."""
    src = inputs[0]._data
    owner = getattr(data, "base", None)
    # advanced indexing and reshapes of non-contiguous data copy: writing to such a copy
    # must not look like writing to the input
    if owner is not None and (owner is src or owner is src.base or device.xp.may_share_memory(data, src)):
        base = inputs[0]
        out._base = base._base if base._base is not None else base


def bind(prim: Primitive, inputs: tuple, params: dict) -> Tensor:
    """Apply `prim` to tensors `inputs` with static `params`; the core of eager execution."""
    lazy = trace_state.lazy
    if lazy is not None:
        deferred = lazy.defer(prim, inputs, params)
        if deferred is not None:
            return deferred
    if inputs:
        device = inputs[0]._device
        if len(inputs) > 1:
            for t in inputs:
                if t._device is not device:
                    check_same_device(prim.name, inputs)
        try:
            if params:
                data = prim.kernel(device._xp or device.xp, *[t._data for t in inputs], **params)
            elif len(inputs) == 2:
                data = prim.kernel(device._xp or device.xp, inputs[0]._data, inputs[1]._data)
            else:
                data = prim.kernel(device._xp or device.xp, *[t._data for t in inputs])
        except Exception as exc:  # noqa: BLE001 - re-raised with a clearer message when possible
            _raise_kernel_error(prim, inputs, params, exc)
    else:
        device = params["device"]
        data = prim.kernel(device.xp, **params)
    if data.__class__ is not _ndarray and device.type == "cpu":
        data = np.asarray(data)
    out = _new(_Tensor)
    out._data = data
    out._device = device
    if prim.is_view and inputs:
        _mark_view(prim, inputs, data, out, device)
    for t in inputs:
        if t.requires_grad:
            if _grad_state.enabled and data.dtype.kind in "fV":  # int/bool results never need grads ("V": bfloat16)
                out.requires_grad = True
                out._node = Node(prim, inputs, params, out)
            break
    tracer = trace_state.tracer
    if tracer is not None:
        tracer.record(prim, inputs, params, out)
    return out


_NO_PARAMS: dict = {}


def bind_binary(prim: Primitive, a: Tensor, b: Tensor) -> Tensor:
    """`bind` for a two-input primitive without params (the arithmetic operators' fast path)."""
    lazy = trace_state.lazy
    if lazy is not None:
        deferred = lazy.defer(prim, (a, b), _NO_PARAMS)
        if deferred is not None:
            return deferred
    device = a._device
    if b._device is not device:
        check_same_device(prim.name, (a, b))
    try:
        data = prim.kernel(device._xp or device.xp, a._data, b._data)
    except Exception as exc:  # noqa: BLE001
        _raise_kernel_error(prim, (a, b), _NO_PARAMS, exc)
    if data.__class__ is not _ndarray and device.type == "cpu":
        data = np.asarray(data)
    out = _new(_Tensor)
    out._data = data
    out._device = device
    if (a.requires_grad or b.requires_grad) and _grad_state.enabled and data.dtype.kind in "fV":
        out.requires_grad = True
        out._node = Node(prim, (a, b), _NO_PARAMS, out)
    tracer = trace_state.tracer
    if tracer is not None:
        tracer.record(prim, (a, b), _NO_PARAMS, out)
    return out
