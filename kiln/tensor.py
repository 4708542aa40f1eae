"""The Tensor: an array on a device plus its autograd state.

Math methods and operator overloads are attached in `kiln/tensor_methods.py`, next
to the functional ops they call; this file holds storage, conversion and autograd.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from . import autograd, late_bound
from .device import CPU, Device, get_device, is_device_spec
from .dtypes import (DType, DTypeOverflowError, check_array_fits, default_float, from_numpy_dtype, get_dtype,
                     lossless_array, overflow_error)
from .legacy_tensors import legacy_dtype, legacy_new
from .ops import primitive
from .ops.device_copy import transfer
from .ops.pending import PendingArray


class Tensor:
    """An n-dimensional array with autograd, PyTorch-style.

    >>> x = kiln.tensor([[1.0, 2.0]], requires_grad=True)
    >>> (x * x).sum().backward(); x.grad
    tensor([[2., 4.]])
    """

    # Only the array and device are set on every tensor; the autograd fields live in the
    # instance __dict__ once set and default to these class attributes, which keeps creating
    # a tensor (the hot path of eager mode) to two slot writes.
    __slots__ = ("_data", "_device", "__dict__", "__weakref__")
    __array_ufunc__ = None  # make NumPy defer to our reflected operators
    _grad = None
    _hooks = None
    _post_accumulate_hooks = None
    _ver = 0
    _base = None
    _node = None
    requires_grad = False

    _data: Any
    _device: Device
    _grad: Tensor | None
    _hooks: list | None
    _post_accumulate_hooks: list | None
    _ver: int
    _base: Tensor | None
    _node: autograd.Node | None
    requires_grad: bool

    def __init__(self, *args: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False):
        """``Tensor(2, 3)``: zeros of that shape; ``Tensor([1, 2])``: the data as float32.

        A tensor is shared (it keeps its dtype) and a NumPy array keeps its dtype, so no value is lost.

        Also kiln's older ``Tensor(data, dtype, device, requires_grad)``, positional or by keyword.
        """
        if len(args) > 1 and _names_dtype(args[1]):  # kiln's Tensor(data, dtype, device, requires_grad)
            if len(args) > 4:
                raise TypeError(f"Tensor() takes sizes or (data, dtype, device, requires_grad), got {len(args)} "
                                "arguments; pass the sizes as ints, e.g. kiln.Tensor(2, 3)")
            args, extra = args[:1], dict(zip(("dtype", "device", "requires_grad"), args[1:]))
            dtype, device = extra.get("dtype", dtype), extra.get("device", device)
            requires_grad = extra.get("requires_grad", requires_grad)
        if dtype is not None and len(args) == 1 and not isinstance(args[0], (int, np.integer)):
            src = tensor(args[0], dtype=dtype, device=device)  # kiln's own form: a copy as `dtype`
        else:
            dev = get_device(device) if device is not None else None
            src = legacy_new(args, get_dtype(dtype) if dtype is not None else None, dev, "kiln.Tensor")
        _init_from_array(self, src._data, src._device, requires_grad)
        if src._base is not None:  # Tensor(t) shares t's memory, and so its version counter
            self._base = src._base

    # ---- construction -------------------------------------------------------------
    @staticmethod
    def _wrap(data: Any, device: Device = CPU, requires_grad: bool = False) -> Tensor:
        t = Tensor.__new__(Tensor)
        _init_from_array(t, data, device, requires_grad)
        return t

    # ---- metadata -----------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        tracer = primitive.trace_state.tracer
        if tracer is not None and tracer.symbolic:  # dynamic_dims: sizes are SymInts
            return tracer.shape_of(self)
        return self._data.shape

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    def size(self, dim: int | None = None) -> Any:
        """The shape, or the length of dimension `dim`."""
        if dim is None:
            return self.shape
        return self.shape[dim]

    def numel(self) -> int:
        tracer = primitive.trace_state.tracer
        if tracer is not None and tracer.symbolic:  # dynamic_dims: a symbolic count, not a baked one
            return math.prod(self.shape)
        return int(self._data.size)

    def nelement(self) -> int:
        return self.numel()

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return int(self.shape[0])  # a dynamic size: int() specializes the plan to it (with a warning)

    @property
    def dtype(self) -> DType:
        return from_numpy_dtype(self._data.dtype)

    @property
    def device(self) -> Device:
        return self._device

    @property
    def is_cuda(self) -> bool:
        return self._device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self._device.type == "cpu"

    def is_floating_point(self) -> bool:
        return self._data.dtype.kind in "fV"  # "V": bfloat16 (ml_dtypes)

    def element_size(self) -> int:
        return self._data.itemsize

    # ---- layout: the array's element strides, as PyTorch reports them ---------------
    def stride(self, dim: int | None = None) -> Any:
        """The step, in elements, between neighbours along each dim (a tuple), or along `dim` (an int).

        These are the strides of the NumPy array behind the tensor, divided by its itemsize:
        ``(4, 1)`` for a C-ordered 3x4 tensor, ``(1, 4)`` once transposed, 0 along a dim made
        by ``expand``. kiln's ``flip`` is a view, so a flipped dim steps backwards (a negative
        stride; PyTorch copies there). Inside ``kiln.compile`` the strides are those the tensor
        had while tracing.

        >>> kiln.zeros(3, 4).t().stride()
        (1, 4)
        """
        steps = tuple(s // self._data.itemsize for s in self._data.strides)
        if dim is None:
            return steps
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"stride(): dim must be an int, got {type(dim).__name__}; call stride() for all dims")
        ndim = self._data.ndim
        if ndim == 0:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions; a 0-d tensor's "
                             "stride() is ()")
        if not -ndim <= dim < ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got "
                             f"{dim})")
        return steps[dim]

    def is_contiguous(self, memory_format: Any = None) -> bool:
        """Whether the elements lie in C order without gaps (dims of size 1 and empty tensors always do).

        ``memory_format`` may name PyTorch's ``channels_last`` (4-D) or ``channels_last_3d`` (5-D)
        order, by that name or any object whose str ends with it (``torch.channels_last``).

        >>> kiln.zeros(3, 4).t().is_contiguous()
        False
        """
        name = "contiguous_format" if memory_format is None else str(memory_format).split(".")[-1]
        ndim = self._data.ndim
        if name == "contiguous_format":
            order = list(range(ndim - 1, -1, -1))
        elif name in _CHANNELS_LAST:
            order = _CHANNELS_LAST[name]
            if ndim != len(order):
                return False
        else:
            raise ValueError(f"is_contiguous(): memory_format must be contiguous_format, channels_last or "
                             f"channels_last_3d, got {memory_format!r}")
        if self._data.size == 0:
            return True
        expected, steps = 1, self.stride()
        for d in order:  # innermost first
            size = self._data.shape[d]
            if size != 1 and steps[d] != expected:
                return False
            expected *= size
        return True

    def pin_memory(self, device: Any = None) -> Tensor:
        """A copy in page-locked memory for fast transfers to an accelerator, as PyTorch has.

        kiln has no page-locked memory: with an accelerator (a GPU CuPy can use) this returns a
        copy on the CPU; without one it raises RuntimeError, as a CPU-only PyTorch build does, so
        guard the call as PyTorch scripts do: ``if kiln.cuda.is_available(): x = x.pin_memory()``.

        >>> x = kiln.zeros(3)
        >>> x = x.pin_memory() if kiln.cuda.is_available() else x
        """
        from .accelerator import is_available  # noqa: PLC0415 - kiln.accelerator imports this module's users

        if self._device.type != "cpu":
            raise RuntimeError(f"cannot pin a tensor on {self._device}: only dense CPU tensors can be pinned; "
                               "call x.cpu().pin_memory(), or drop the call")
        if not is_available():
            raise RuntimeError("Cannot access accelerator device when none is available: pin_memory() needs a "
                               "GPU. Guard it as in PyTorch (`if kiln.cuda.is_available(): x = x.pin_memory()`), "
                               "or drop it: kiln's DataLoader accepts pin_memory=True and ignores it")
        return late_bound.functional().clone(self)

    def is_pinned(self, device: Any = None) -> bool:
        """False: kiln never holds a tensor in page-locked memory."""
        return False

    @property
    def _version(self) -> int:
        return self._base._ver if self._base is not None else self._ver

    def _bump_version(self) -> None:
        if self._base is not None:
            self._base._ver += 1
        else:
            self._ver += 1

    # ---- conversion to Python / NumPy (value-dependent: the tracer is told) -------
    def _concrete(self, why: str) -> Any:
        tracer = primitive.trace_state.tracer
        if tracer is not None:
            tracer.on_concretize(self, why)
        data = self._data
        if data.__class__ is PendingArray:  # recorded by djit: computed now (kiln/jit/lazy.py)
            data = self._data = data.realize()
        return data

    def item(self) -> Any:
        """The value of a one-element tensor as a Python number."""
        data = self._concrete("item")
        if data.size != 1:
            raise ValueError(f"item(): expected a tensor with one element, got shape {tuple(data.shape)}")
        return data.reshape(()).item()

    def tolist(self) -> Any:
        return _to_host(self._concrete("tolist")).tolist()

    def numpy(self, force: bool = False) -> np.ndarray:
        """The data as a NumPy array, sharing memory on the CPU."""
        if self.requires_grad and not force:
            raise RuntimeError(
                "Can't call numpy() on a tensor that requires grad. Use tensor.detach().numpy() instead."
            )
        return _to_host(self._concrete("numpy"))

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """NumPy's protocol: shares memory unless `copy` is True or `dtype` differs (np.array copies)."""
        data = _to_host(self._concrete("numpy"))
        if dtype is not None and np.dtype(dtype) != data.dtype:
            if copy is False:
                raise ValueError(f"np.asarray(tensor, dtype={np.dtype(dtype)}, copy=False): converting "
                                 f"{data.dtype} needs a copy")
            return data.astype(dtype)
        return data.copy() if copy else data

    def __bool__(self) -> bool:
        data = self._concrete("bool")
        if data.size != 1:
            raise RuntimeError(
                f"Boolean value of a tensor with {data.size} elements is ambiguous; use .any() or .all()"
            )
        return bool(data.reshape(()))

    def __float__(self) -> float:
        return float(self._float_or_int("float"))

    def __int__(self) -> int:
        return int(self._float_or_int("int"))

    def __index__(self) -> int:
        data = self._concrete("index")
        if data.size != 1 or data.dtype.kind not in "iub":
            raise TypeError(f"only integer tensors of a single element can be converted to an index, "
                            f"got {self.dtype.name} of shape {tuple(data.shape)}")
        return int(data.reshape(()))

    def _float_or_int(self, why: str) -> Any:
        data = self._concrete(why)
        if data.size != 1:
            raise TypeError(f"only one-element tensors can be converted to Python scalars, "
                            f"got shape {tuple(data.shape)}")
        return data.reshape(()).item()

    # ---- autograd -----------------------------------------------------------------
    @property
    def grad(self) -> Tensor | None:
        """The gradient backward() accumulated into this tensor (None until then).

        Reads and writes are reported to an active kiln.compile trace, so a compiled training
        step sets ``.grad`` on every call as eager code does.
        """
        tracer = primitive.trace_state.tracer
        if tracer is not None:
            return tracer.on_grad_read(self)
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        tracer = primitive.trace_state.tracer
        if tracer is not None:
            tracer.on_grad_write(self, value)
        self._grad = value

    @property
    def grad_fn(self) -> autograd.Node | None:
        return self._node

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if requires_grad and self._data.dtype.kind not in "fV":
            raise RuntimeError(f"only floating point tensors can require gradients, got {self.dtype.name}")
        if not self.is_leaf and not requires_grad:
            raise RuntimeError("you can only change requires_grad of leaf tensors; use detach() instead")
        self.requires_grad = requires_grad
        return self

    def detach(self) -> Tensor:
        """A tensor sharing this data, cut from the autograd graph."""
        out = Tensor._wrap(self._data, self._device)
        out._base = self._base if self._base is not None else self
        tracer = primitive.trace_state.tracer
        if tracer is not None:
            tracer.on_detach(self, out)
        return out

    def detach_(self) -> Tensor:
        self._node = None
        self.requires_grad = False
        return self

    def retain_grad(self) -> None:
        """Keep .grad for this non-leaf tensor after backward()."""
        if self._node is None:
            return
        import weakref  # noqa: PLC0415

        self._node.retain_ref = weakref.ref(self)

    @property
    def retains_grad(self) -> bool:
        return self._node is not None and self._node.retain_ref is not None

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> _HookHandle:
        """Call `hook(grad)` when this tensor's gradient is computed; it may return a new grad."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._node is not None:
            hooks = self._node.hooks
            if hooks is None:
                hooks = self._node.hooks = []
        else:
            if self._hooks is None:
                self._hooks = []
            hooks = self._hooks
            LeafHookEpoch.bump()
        hooks.append(hook)
        return _HookHandle(hooks, hook, leaf=self._node is None)

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]) -> _HookHandle:
        """Call `hook(self)` once per backward pass, right after this leaf's ``.grad`` was updated.

        backward() delivers a leaf's gradient as soon as no remaining part of the graph can add
        to it, so the hook may run while backward goes on (DistributedDataParallel starts a
        bucket's all-reduce from it). Its return value is ignored. Not called by
        ``kiln.autograd.grad``, which leaves ``.grad`` alone.
        """
        if self._node is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors; "
                               "register it on a leaf (a parameter or a tensor created with requires_grad=True)")
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._post_accumulate_hooks is None:
            self._post_accumulate_hooks = []
        self._post_accumulate_hooks.append(hook)
        LeafHookEpoch.bump()
        return _HookHandle(self._post_accumulate_hooks, hook, leaf=True)

    def backward(self, gradient: Tensor | None = None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs: Sequence[Tensor] | None = None) -> None:
        """Accumulate d(self)/d(leaf) into the ``.grad`` of every leaf that requires grad."""
        if not self.requires_grad:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
        if gradient is None:
            gradient = autograd.default_grad(self)
        elif not isinstance(gradient, Tensor):
            gradient = tensor(gradient, dtype=self.dtype)
        if tuple(gradient.shape) != tuple(self.shape):
            raise ValueError(f"backward(): gradient has shape {tuple(gradient.shape)}, "
                             f"expected the tensor's shape {tuple(self.shape)}")
        retain = create_graph if retain_graph is None else retain_graph
        if inputs is not None:
            grads = autograd.run_backward([self], [gradient], retain, create_graph, inputs=list(inputs))
            for t, g in zip(inputs, grads or []):
                if g is not None:  # a private buffer when new: grads of different inputs may share one
                    autograd.accumulate_grad(t, g, create_graph, _private_copy)
                    if t._node is None:
                        autograd.run_post_accumulate_hooks(t)
            return
        autograd.run_backward([self], [gradient], retain, create_graph)

    # ---- copies and moves ---------------------------------------------------------
    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """Convert dtype and/or device: ``x.to(kiln.float64)``, ``x.to("cpu")``."""
        dtype = kwargs.pop("dtype", None)
        device = kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        copy = kwargs.pop("copy", False)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for arg in args:
            if isinstance(arg, Tensor):
                dtype, device = arg.dtype, arg.device
            elif is_device_spec(arg):
                device = arg
            else:
                dtype = arg
        out = self
        if dtype is not None:
            out = late_bound.functional().cast(out, get_dtype(dtype))
        if device is not None:
            dev = get_device(device)
            if dev != out._device:
                out = transfer(out, dev)
        if copy and out is self:
            out = self.clone()
        return out

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def cuda(self) -> Tensor:
        return self.to("cuda")

    def float(self) -> Tensor:
        return self.to(default_float)

    def double(self) -> Tensor:
        return self.to("float64")

    def half(self) -> Tensor:
        return self.to("float16")

    def long(self) -> Tensor:
        return self.to("int64")

    def int(self) -> Tensor:
        return self.to("int32")

    def bool(self) -> Tensor:
        return self.to("bool")

    def type(self, dtype: Any = None) -> Any:
        """The dtype's name with no argument; else this tensor as `dtype`, which may be a legacy
        class or its name (``x.type(kiln.LongTensor)``, ``x.type("torch.LongTensor")``)."""
        if dtype is None:
            return f"kiln.{self.dtype.name}"
        return self.to(legacy_dtype(dtype) or dtype)

    # ---- printing -----------------------------------------------------------------
    def __repr__(self) -> str:
        host = _to_host(self._data)
        if host.dtype.kind == "V":  # bfloat16 prints its values as floats ("1." rather than "1")
            host = host.astype(np.float32)
        body = np.array2string(host, separator=", ", prefix="tensor(", precision=4)
        extras = []
        if self.dtype not in (default_float, from_numpy_dtype(np.dtype(np.int64)), get_dtype("bool")):
            extras.append(f"dtype={self.dtype!r}")
        if self._device.type != "cpu":
            extras.append(f"device='{self._device}'")
        if self._node is not None:
            extras.append(f"grad_fn={self._node!r}")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    def __hash__(self) -> int:
        return id(self)

    def __reduce__(self):
        return (tensor, (_to_host(self._data), self.dtype.name, str(self._device), self.requires_grad))


_CHANNELS_LAST = {"channels_last": [1, 3, 2, 0], "channels_last_3d": [1, 4, 3, 2, 0]}  # dims, innermost first


def _names_dtype(arg: Any) -> bool:
    """Whether the second positional argument of ``Tensor(...)`` is a dtype (or None) rather than a size."""
    return arg is None or isinstance(arg, (DType, str, type, np.dtype)) or type(arg).__name__ == "dtype"


def _not_on(device_type: str) -> property:
    """An ``is_<device>`` property for a device kiln never puts a tensor on: always False."""
    return property(lambda self: False, doc=f"False: kiln keeps no tensor on {device_type}.")


for _kind in ("ipu", "maia", "meta", "mkldnn", "mps", "mtia", "vulkan", "xla", "xpu"):
    setattr(Tensor, f"is_{_kind}", _not_on(_kind))


def _init_from_array(t: Tensor, data: Any, device: Device, requires_grad: bool) -> None:
    t._data = data
    t._device = device
    if requires_grad:
        t.requires_grad_(True)


class LeafHookEpoch:
    """A process-wide counter bumped whenever a hook is registered on, or removed from, a leaf
    tensor (a parameter). Hooks run inside a compiled training step, so compiled functions key
    their plans on it: a hook added or removed between calls retraces instead of being missed."""

    value = 0

    @classmethod
    def bump(cls) -> None:
        cls.value += 1


class DataEpoch:
    """A process-wide counter bumped whenever a tensor is made to hold an array of another shape,
    dtype or device (``p.data = t``, ``module.to(dtype)``). Compiled plans read parameters and
    buffers with the shapes they were traced for; after a bump they check them again."""

    value = 0

    @classmethod
    def replaced(cls, t: Tensor, data: Any, device: Device) -> None:
        """Note that `t` is about to hold `data` on `device` (a bump only if its layout changes)."""
        old = t._data
        if old.shape != data.shape or old.dtype != data.dtype or t._device != device:
            cls.value += 1


class _HookHandle:
    """Returned by register_hook; ``handle.remove()`` unregisters the hook."""

    def __init__(self, hooks: list, hook: Callable, leaf: bool):
        self._hooks, self._hook, self._leaf = hooks, hook, leaf

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)
            if self._leaf:
                LeafHookEpoch.bump()


def _private_copy(g: Tensor) -> Tensor:
    return Tensor._wrap(g._data.copy(), g._device)


def _to_host(data: Any) -> np.ndarray:
    if isinstance(data, np.ndarray):
        return data
    if data.__class__ is PendingArray:
        return data.realize()
    return data.get()  # cupy


def _infer_dtype(data: Any) -> DType | None:
    """The dtype a Python value gets: floats -> default float, ints -> int64, bools -> bool."""
    if isinstance(data, np.ndarray):
        return from_numpy_dtype(data.dtype)
    if isinstance(data, (np.generic,)):
        return from_numpy_dtype(np.asarray(data).dtype)
    return None


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """Create a tensor from a list, scalar, NumPy array or tensor (always copies).

    A Python number that an integer dtype cannot hold raises kiln.DTypeOverflowError (as
    PyTorch raises). Without `dtype`, a NumPy array keeps its values (see `from_numpy`);
    with one, NumPy arrays and tensors are cast, wrapping around (as in PyTorch).

    >>> kiln.tensor([[1, 2], [3, 4]], dtype=kiln.float64, requires_grad=True)
    """
    dev = get_device(device)
    if isinstance(data, Tensor):
        arr = _to_host(data._data).copy()
        kind = data.dtype
    else:
        kind = _infer_dtype(data)
        try:
            arr = np.array(_unwrap_nested(data))
        except ValueError as exc:
            raise ValueError(f"kiln.tensor(): could not build an array from the data ({exc})") from None
        if arr.dtype == object:
            arr = _huge_ints(arr, data, dtype)
        if dtype is None and isinstance(data, (np.ndarray, np.generic)):
            arr = lossless_array(arr, "kiln.tensor")
        if kind is None:
            kind = _python_dtype(arr)
    target = get_dtype(dtype) if dtype is not None else kind
    if target.kind == "i" and arr.dtype != target.np and not isinstance(data, (Tensor, np.ndarray)):
        check_array_fits(arr, target, "kiln.tensor")  # Python numbers are checked, arrays cast (as PyTorch)
    with np.errstate(over="ignore", invalid="ignore"):  # 1e40 as float32 is inf, quietly (as PyTorch)
        arr = np.asarray(arr, dtype=target.np, order="C")  # (ascontiguousarray would make 0-d 1-d)
    if dev.type != "cpu":
        arr = dev.xp.asarray(arr)
    return Tensor._wrap(arr, dev, requires_grad)


def _huge_ints(arr: np.ndarray, data: Any, dtype: Any) -> np.ndarray:
    """An object array NumPy made from Python ints beyond 64 bits: floats for a float dtype, else overflow."""
    values = arr.reshape(-1).tolist()
    if not values or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        raise TypeError(f"kiln.tensor(): unsupported data of type {type(data).__name__}; "
                        "expected numbers, nested lists of numbers, or an array")
    target = get_dtype(dtype) if dtype is not None else get_dtype("int64")
    if target.kind == "i":
        raise overflow_error("kiln.tensor", int(max(values, key=abs)), target)
    try:
        return np.array(values, dtype=np.float64).reshape(arr.shape)  # then cast to the dtype asked
    except OverflowError:
        digits = len(str(abs(int(max(values, key=abs)))))
        raise DTypeOverflowError(f"kiln.tensor(): an int of {digits} digits is too large for any float dtype "
                                 f"(float64 holds up to about 1.8e308), so it cannot become {target.name}") from None


def _python_dtype(arr: np.ndarray) -> DType:
    if arr.dtype.kind == "f":
        return default_float
    if arr.dtype.kind in "iu":
        return get_dtype("int64")
    if arr.dtype.kind == "b":
        return get_dtype("bool")
    return from_numpy_dtype(arr.dtype)


def _unwrap_nested(data: Any) -> Any:
    """Lists may hold 0-d tensors (``[x.sum(), y.sum()]``); turn them into numbers."""
    if isinstance(data, (list, tuple)):
        return [_unwrap_nested(d) for d in data]
    if isinstance(data, Tensor):
        return _to_host(data.detach()._data)
    return data


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Like `tensor`, but returns `data` itself when it already has that dtype and device."""
    if isinstance(data, Tensor):
        if (dtype is None or get_dtype(dtype) == data.dtype) and (device is None or get_device(device) == data.device):
            return data
        return data.to(dtype=dtype, device=device)
    if isinstance(data, np.ndarray) and device is None and (dtype is None or get_dtype(dtype).np == data.dtype):
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing memory with a NumPy array whose dtype kiln has, in native byte order.

    Other arrays are converted to a copy without losing a value: byte order is swapped
    (big-endian float64 stays float64) and narrower integers widen to int64; a uint64
    value above int64's range raises kiln.DTypeOverflowError.
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy() expects a numpy.ndarray, got {type(array).__name__}")
    return Tensor._wrap(lossless_array(array, "kiln.from_numpy"), CPU)


def is_tensor(obj: Any) -> bool:
    return isinstance(obj, Tensor)


class Literal(Tensor):
    """A 0-d tensor the frontend made from a Python scalar operand (``x + 1.0``).

    Nothing else holds it, so it never changes: the compiler may bake its value in.
    """

    __slots__ = ()


def literal(value: Any, dtype: DType, device: Device) -> Tensor:
    t = Literal.__new__(Literal)
    with np.errstate(over="ignore", invalid="ignore"):  # 1e6 as float16 is inf, quietly (as PyTorch)
        data = device.xp.asarray(value, dtype=dtype.np)
    _init_from_array(t, data, device, False)
    return t


primitive._Tensor = Tensor  # bind() creates outputs of this class
late_bound.Tensor, late_bound.tensor = Tensor, tensor  # the modules below this one make tensors too
