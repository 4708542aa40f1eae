"""Tensor creation: constant fills, ranges, and random draws from the counter-based stream."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..device import Device, get_device
from ..dtypes import check_fits, default_float, get_dtype, scalar_dtype
from ..ops.primitive import REGISTRY, bind
from ..trace_state import trace_state
from ..ops.random_ops import normal_count, uniform_count
from ..random import Generator, default_generator
from ..sizes import is_int
from ..tensor import Tensor
from .checks import int_arg, size_tuple

_P = REGISTRY


def _shape(shape: tuple, op: str) -> tuple[int, ...]:
    """The size arguments of creation op `op` as a tuple of ints (TypeError names a bad one)."""
    out = size_tuple(op, shape)
    if any(d < 0 for d in out):
        raise ValueError(f"{op}(): negative dimension in shape {out}")
    return out


def _size(size: Any, op: str) -> tuple[int, ...]:
    """A `size=` argument: an int or a sequence of ints."""
    return _shape(tuple(size) if isinstance(size, (tuple, list)) else (size,), op)


def size_arg(shape: tuple, size: Any, op: str) -> tuple[int, ...]:
    """The shape of creation op `op`: positional sizes (``zeros(2, 3)``, ``zeros((2, 3))``) or ``size=``."""
    if size is None:
        return _shape(shape, op)
    if shape:
        raise TypeError(f"{op}() got the size twice, as positional arguments {shape} and as size={size!r}; "
                        f"pass one, e.g. {op}(size={size!r})")
    return _size(size, op)


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    if requires_grad:
        t = t.detach()
        t.requires_grad_(True)
    return t


def full(size: Any = None, fill_value: Any = None, *, shape: Any = None, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    """A tensor of `size` filled with `fill_value` (NumPy's spelling ``shape=`` works too).

    An integer dtype that cannot hold `fill_value` raises (kiln.DTypeOverflowError), as in PyTorch.

    >>> kiln.full((2, 3), 7.0).shape
    (2, 3)
    """
    if shape is not None and size is not None:
        raise TypeError(f"full() got both size={size!r} and shape={shape!r}; pass one")
    if size is None and shape is None or fill_value is None:
        raise TypeError("full() needs a size and a fill_value, e.g. kiln.full((2, 3), 7.0)")
    shape = _size(size if size is not None else shape, "full")
    dt = get_dtype(dtype) if dtype is not None else scalar_dtype(fill_value)
    if dt.kind == "i":
        check_fits(fill_value, dt, "full")
    out = bind(_P["full"], (), {"shape": shape, "value": fill_value, "dtype": dt.name,
                                "device": get_device(device)})
    return _finish(out, requires_grad)


def zeros(*shape: Any, size: Any = None, dtype: Any = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    """A tensor of zeros: ``zeros(2, 3)``, ``zeros((2, 3))`` or ``zeros(size=(2, 3))``."""
    return full(size_arg(shape, size, "zeros"), 0.0, dtype=dtype or default_float, device=device,
                requires_grad=requires_grad)


def ones(*shape: Any, size: Any = None, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    """A tensor of ones: ``ones(2, 3)``, ``ones((2, 3))`` or ``ones(size=(2, 3))``."""
    return full(size_arg(shape, size, "ones"), 1.0, dtype=dtype or default_float, device=device,
                requires_grad=requires_grad)


def empty(*shape: Any, size: Any = None, dtype: Any = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    """Uninitialized in PyTorch; zero-filled here so results are never garbage."""
    return zeros(size_arg(shape, size, "empty"), dtype=dtype, device=device, requires_grad=requires_grad)


def _like(x: Tensor, dtype: Any, device: Any) -> tuple[Any, Device]:
    return (dtype if dtype is not None else x.dtype), (get_device(device) if device is not None else x.device)


def full_like(x: Tensor, fill_value: Any, *, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    dt, dev = _like(x, dtype, device)
    return full(tuple(x.shape), fill_value, dtype=dt, device=dev, requires_grad=requires_grad)


def zeros_like(x: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return full_like(x, 0, dtype=dtype, device=device, requires_grad=requires_grad)


def ones_like(x: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return full_like(x, 1, dtype=dtype, device=device, requires_grad=requires_grad)


def empty_like(x: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return zeros_like(x, dtype=dtype, device=device, requires_grad=requires_grad)


def arange(start: Any, end: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None,
           requires_grad: bool = False) -> Tensor:
    """Values from start (inclusive) to end (exclusive) by step; ints give int64."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if dtype is None:
        integral = all(is_int(v) or isinstance(v, np.integer) for v in (start, end, step))
        dtype = "int64" if integral else default_float
    _check_range_fits(start, end, step, get_dtype(dtype))
    out = bind(_P["arange"], (), {"start": start, "stop": end, "step": step,
                                  "dtype": get_dtype(dtype).name, "device": get_device(device)})
    return _finish(out, requires_grad)


def _check_range_fits(start: Any, end: Any, step: Any, dtype: Any) -> None:
    """An integer arange must not wrap: its first and last values must fit `dtype`."""
    if dtype.kind != "i" or not all(type(v) is int or isinstance(v, np.integer) for v in (start, end, step)):
        return
    start, end, step = int(start), int(end), int(step)
    count = max(0, -((start - end) // step))  # ceil((end - start) / step)
    if count:
        check_fits(start, dtype, "arange")
        check_fits(start + (count - 1) * step, dtype, "arange")


def linspace(start: float, end: float, steps: int, *, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """`steps` evenly spaced values from start to end inclusive."""
    steps = int_arg("linspace", "steps", steps)
    dt = get_dtype(dtype) if dtype is not None else default_float
    if steps == 1:
        return full((1,), start, dtype=dt, device=device, requires_grad=requires_grad)
    idx = arange(steps, dtype="float64", device=device)
    delta = (end - start) / (steps - 1)
    out = (idx * delta + start).to(dt)
    return _finish(out, requires_grad)


def eye(n: int, m: int | None = None, *, dtype: Any = None, device: Any = None,
        requires_grad: bool = False) -> Tensor:
    n = int_arg("eye", "n", n)
    m = n if m is None else int_arg("eye", "m", m)
    r = arange(n, device=device).reshape(n, 1)
    c = arange(m, device=device).reshape(1, m)
    out = (r == c).to(dtype if dtype is not None else default_float)
    return _finish(out, requires_grad)


# ---- random -----------------------------------------------------------------------
def _key(gen: Generator | None, n: int, device: Device) -> Tensor:
    generator = gen or default_generator
    seed, offset = generator.take(n)
    key = Tensor._wrap(device.xp.asarray([seed, offset], dtype=np.int64), device)
    tracer = trace_state.tracer
    if tracer is not None:
        tracer.on_rng_key(key, generator, n)  # compiled code draws a fresh key per call
    return key


def _float_dtype(dtype: Any, op: str) -> Any:
    dt = get_dtype(dtype) if dtype is not None else default_float
    if not dt.is_floating_point:
        raise TypeError(f"{op}: dtype must be a floating point dtype, got {dt.name}; use randint for integers")
    return dt


def rand(*shape: Any, size: Any = None, dtype: Any = None, device: Any = None, generator: Generator | None = None,
         requires_grad: bool = False) -> Tensor:
    """Uniform [0, 1) floats from the global counter-based stream: ``rand(2, 3)`` or ``rand(size=(2, 3))``."""
    shape = size_arg(shape, size, "rand")
    dev = get_device(device)
    dt = _float_dtype(dtype, "rand")
    out = bind(_P["uniform"], (_key(generator, uniform_count(shape), dev),), {"shape": shape, "dtype": dt.name})
    return _finish(out, requires_grad)


def randn(*shape: Any, size: Any = None, dtype: Any = None, device: Any = None, generator: Generator | None = None,
          requires_grad: bool = False) -> Tensor:
    """Standard normal floats from the global counter-based stream: ``randn(2, 3)`` or ``randn(size=(2, 3))``."""
    shape = size_arg(shape, size, "randn")
    dev = get_device(device)
    dt = _float_dtype(dtype, "randn")
    out = bind(_P["normal"], (_key(generator, normal_count(shape), dev),), {"shape": shape, "dtype": dt.name})
    return _finish(out, requires_grad)


def randint(low: int = 0, high: int | None = None, size: Any = None, *, dtype: Any = None,
            device: Any = None, generator: Generator | None = None) -> Tensor:
    """Integers uniform in [low, high): ``randint(low, high, size)`` or ``randint(high, size)``.

    >>> kiln.randint(10, (3,))        # in [0, 10)
    >>> kiln.randint(5, 10, size=(2, 2))
    >>> kiln.randint(high=10, size=(3,))
    """
    if size is None and isinstance(high, (tuple, list)):  # randint(high, size)
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if size is None:
        raise TypeError("randint() needs size, e.g. randint(10, (3,)) or randint(0, 10, (3,))")
    if high <= low:
        raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
    u = rand(*_size(size, "randint"), dtype="float64",
             device=device, generator=generator)
    return (u * (high - low)).floor().to(dtype or "int64") + low


def rand_like(x: Tensor, *, dtype: Any = None, generator: Generator | None = None) -> Tensor:
    return rand(*x.shape, dtype=dtype or x.dtype, device=x.device, generator=generator)


def randn_like(x: Tensor, *, dtype: Any = None, generator: Generator | None = None) -> Tensor:
    return randn(*x.shape, dtype=dtype or x.dtype, device=x.device, generator=generator)


def normal(mean: float = 0.0, std: float = 1.0, size: Any = None, *, dtype: Any = None,
           device: Any = None, generator: Generator | None = None) -> Tensor:
    if size is None:
        raise TypeError("normal() needs size")
    z = randn(*_size(size, "normal"), dtype=dtype, device=device,
              generator=generator)
    return z * std + mean


def uniform(low: float = 0.0, high: float = 1.0, size: Any = None, *, dtype: Any = None,
            device: Any = None, generator: Generator | None = None) -> Tensor:
    if size is None:
        raise TypeError("uniform() needs size")
    u = rand(*_size(size, "uniform"), dtype=dtype, device=device,
             generator=generator)
    return u * (high - low) + low


def randperm(n: int, *, dtype: Any = None, device: Any = None, generator: Generator | None = None) -> Tensor:
    """A random permutation of 0..n-1 (argsort of uniform draws)."""
    n = int_arg("randperm", "n", n)
    dev = get_device(device)
    u = rand(n, dtype="float64", device=dev, generator=generator)
    # argsort is no primitive: reading the draws tells a tracer this value is data-dependent
    order = dev.xp.argsort(u._concrete("randperm"), kind="stable")
    return Tensor._wrap(order.astype(get_dtype(dtype or "int64").np), dev)
