"""Tensor methods and operators, attached to `Tensor` from the functional ops they call.

In-place ops (`add_`, `__setitem__`, ...) compute the out-of-place result, write it
into the tensor's own buffer (so views see it), adopt its autograd node, and bump
the version counter that backward() checks.
"""
from __future__ import annotations

from typing import Any, Callable

from . import autograd, tensor_data
from .functional import activations, bitwise, compare, creation, math, random_fill, sampling, shape, sorting, tiling
from .functional import diagonal as diagonals
from .functional import scatter as scatters
from .functional import trig
from .dtypes import check_fits
from .ops import primitive
from .ops.pending import PendingArray
from .ops.primitive import REGISTRY, bind_binary
from .tensor import Tensor


def _method(fn: Callable) -> Callable:
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Any:
        return fn(self, *args, **kwargs)

    method.__name__ = fn.__name__
    method.__doc__ = fn.__doc__
    return method


_PLAIN = {
    # math
    "add": math.add, "sub": math.sub, "mul": math.mul, "div": math.div, "pow": math.pow,
    "neg": math.neg, "exp": math.exp, "log": math.log, "log1p": math.log1p, "sin": math.sin,
    "cos": math.cos, "sqrt": math.sqrt, "rsqrt": math.rsqrt, "tanh": math.tanh,
    "sigmoid": math.sigmoid, "relu": math.relu, "erf": math.erf, "abs": math.abs,
    "sign": math.sign, "square": math.square, "clamp": math.clamp, "clip": math.clamp,
    "maximum": math.maximum, "minimum": math.minimum, "reciprocal": math.reciprocal,
    "floor": math.floor, "ceil": math.ceil, "round": math.round, "isnan": math.isnan,
    "isinf": math.isinf, "isfinite": math.isfinite, "logical_not": math.logical_not,
    "logical_and": math.logical_and, "logical_or": math.logical_or,
    "eq": math.eq, "ne": math.ne, "lt": math.lt, "le": math.le, "gt": math.gt, "ge": math.ge,
    "sum": math.sum, "mean": math.mean, "var": math.var, "std": math.std, "max": math.max,
    "min": math.min, "amax": math.amax, "amin": math.amin, "argmax": math.argmax,
    "argmin": math.argmin, "logsumexp": math.logsumexp, "cumsum": math.cumsum, "prod": math.prod,
    "all": math.all, "any": math.any, "norm": math.norm, "matmul": math.matmul, "mm": math.mm,
    "bmm": math.bmm, "dot": math.dot, "where": lambda self, cond, other: math.where(cond, self, other),
    "remainder": math.remainder, "floor_divide": math.floor_divide,
    # shape
    "reshape": shape.reshape, "view": shape.view, "flatten": shape.flatten, "squeeze": shape.squeeze,
    "unsqueeze": shape.unsqueeze, "permute": shape.permute, "transpose": shape.transpose,
    "swapaxes": shape.swapaxes, "t": shape.t, "expand": shape.expand, "broadcast_to": shape.broadcast_to,
    "split": shape.split, "chunk": shape.chunk, "narrow": shape.narrow, "unbind": shape.unbind,
    "select": shape.select, "flip": shape.flip, "gather": shape.gather, "index_select": shape.index_select, "index_copy": shape.index_copy,
    "index_add": shape.index_add,
    "masked_fill": shape.masked_fill, "tril": shape.tril, "triu": shape.triu, "clone": shape.clone,
    "contiguous": shape.contiguous, "movedim": shape.movedim, "scatter_add": shape.scatter_add,
    "take_along_dim": shape.take_along_dim, "roll": shape.roll,
    "diag": diagonals.diag, "diagonal": diagonals.diagonal, "diag_embed": diagonals.diag_embed,
    "trace": diagonals.trace, "scatter": scatters.scatter, "scatter_reduce": scatters.scatter_reduce,
    # trigonometric, hyperbolic and bitwise
    **{name: getattr(trig, name) for name in trig.__all__},
    **{name: getattr(bitwise, name) for name in bitwise.__all__},
}

for _name, _fn in _PLAIN.items():
    setattr(Tensor, _name, _method(_fn))


def _view_as(self: Tensor, other: Tensor) -> Tensor:
    return shape.reshape(self, tuple(other.shape))


def _expand_as(self: Tensor, other: Tensor) -> Tensor:
    return shape.expand(self, tuple(other.shape))


def _type_as(self: Tensor, other: Tensor) -> Tensor:
    return math.cast(self, other.dtype)


Tensor.view_as = _view_as
Tensor.expand_as = _expand_as
Tensor.type_as = _type_as
Tensor.T = property(lambda self: shape.permute(self, tuple(reversed(range(self.ndim)))))
Tensor.mT = property(lambda self: shape.transpose(self, -2, -1))

# ---- operators --------------------------------------------------------------------
def _operator(name: str, general: Callable, reflected: bool = False) -> Callable:
    """An arithmetic dunder: two same-dtype tensors go straight to bind_binary."""
    prim = REGISTRY[name]

    if reflected:
        def op(a: Tensor, b: Any) -> Tensor:
            return general(b, a)
        return op

    def op(a: Tensor, b: Any) -> Tensor:  # noqa: F811
        if isinstance(b, Tensor) and a._data.dtype is b._data.dtype:
            return bind_binary(prim, a, b)
        return general(a, b)

    return op


Tensor.__add__ = _operator("add", math.add)
Tensor.__radd__ = _operator("add", math.add, reflected=True)
Tensor.__sub__ = _operator("sub", math.sub)
Tensor.__rsub__ = _operator("sub", math.sub, reflected=True)
Tensor.__mul__ = _operator("mul", math.mul)
Tensor.__rmul__ = _operator("mul", math.mul, reflected=True)
Tensor.__truediv__ = lambda a, b: math.div(a, b)
Tensor.__rtruediv__ = lambda a, b: math.div(b, a)
Tensor.__floordiv__ = lambda a, b: math.floor_divide(a, b)
Tensor.__rfloordiv__ = lambda a, b: math.floor_divide(b, a)
Tensor.__mod__ = lambda a, b: math.remainder(a, b)
Tensor.__rmod__ = lambda a, b: math.remainder(b, a)
Tensor.__pow__ = lambda a, b: math.pow(a, b)
Tensor.__rpow__ = lambda a, b: math.pow(b, a)
Tensor.__matmul__ = lambda a, b: math.matmul(a, b)
Tensor.__rmatmul__ = lambda a, b: math.matmul(b, a)
Tensor.__neg__ = lambda a: math.neg(a)
Tensor.__pos__ = lambda a: a
Tensor.__abs__ = lambda a: math.abs(a)
# `&`, `|`, `^`, `~`: bitwise on integers, logical on bools; floats raise TypeError (kiln/functional/bitwise.py)
Tensor.__invert__ = lambda a: bitwise.bitwise_not(a)
Tensor.__and__ = lambda a, b: bitwise.bitwise_and(a, b)
Tensor.__rand__ = lambda a, b: bitwise.bitwise_and(b, a)
Tensor.__or__ = lambda a, b: bitwise.bitwise_or(a, b)
Tensor.__ror__ = lambda a, b: bitwise.bitwise_or(b, a)
Tensor.__xor__ = lambda a, b: bitwise.bitwise_xor(a, b)
Tensor.__rxor__ = lambda a, b: bitwise.bitwise_xor(b, a)
Tensor.__lt__ = lambda a, b: math.lt(a, b)
Tensor.__le__ = lambda a, b: math.le(a, b)
Tensor.__gt__ = lambda a, b: math.gt(a, b)
Tensor.__ge__ = lambda a, b: math.ge(a, b)
Tensor.__eq__ = lambda a, b: math.eq(a, b)  # type: ignore[assignment]
Tensor.__ne__ = lambda a, b: math.ne(a, b)  # type: ignore[assignment]
Tensor.__getitem__ = lambda self, index: shape.getitem(self, index)


def _iter(self: Tensor):
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    return (shape.select(self, 0, i) for i in range(int(self.shape[0])))  # int(): a dynamic size specializes


Tensor.__iter__ = _iter


# ---- in-place ops -----------------------------------------------------------------
def _check_inplace_autograd(self: Tensor, others: tuple) -> bool:
    """True when the in-place op must be recorded for autograd; raise where PyTorch does."""
    if not autograd._state.enabled:
        return False
    needs = self.requires_grad or any(isinstance(o, Tensor) and o.requires_grad for o in others)
    if not needs:
        return False
    if self.requires_grad and self._node is None:
        raise RuntimeError(
            "a leaf tensor that requires grad is being used in an in-place operation; wrap the "
            "update in `with kiln.no_grad():`, or operate on a clone()"
        )
    if self._base is not None:
        raise RuntimeError(
            "in-place operations on a view of a tensor are not supported while recording "
            "gradients; use the out-of-place op (e.g. x = x + y) or clone() the view first"
        )
    return True


def apply_inplace(self: Tensor, compute: Callable[[Tensor], Tensor], *others: Any) -> Tensor:
    """Run `compute(old_self)` out of place, then make `self` hold the result."""
    lazy = primitive.trace_state.lazy
    if lazy is not None:  # djit: ops recorded before this one read the old values (kiln/jit/lazy.py)
        lazy.realize()
    if self._data.__class__ is PendingArray:
        self._data = self._data.realize()
    record = _check_inplace_autograd(self, others)
    tracer = primitive.trace_state.tracer
    if record:
        old = Tensor._wrap(self._data.copy(), self._device)
        old._node, old.requires_grad = self._node, self.requires_grad
        if old._node is not None and not old._node.prim.saves_output:
            # a node whose VJP reads its output keeps pointing at `self`, so backward
            # sees the version bump and raises, as PyTorch does
            old._node.rebind_output(old)
        if tracer is not None:
            tracer.on_alias(self, old)
        new = compute(old)
    else:
        with autograd.no_grad():
            new = compute(self)
    if tuple(new.shape) != tuple(self.shape):
        raise RuntimeError(f"in-place op: the result has shape {tuple(new.shape)}, which cannot be "
                           f"written into a tensor of shape {tuple(self.shape)}")
    if new._data.dtype != self._data.dtype:
        if new._data.dtype.kind == "f" and self._data.dtype.kind in "biu":
            raise RuntimeError(f"in-place op: result type {new.dtype.name} can't be cast to the "
                               f"desired output type {self.dtype.name}")
        # a recorded cast: self keeps its dtype, its gradient comes back in new's, and a trace sees it
        with autograd.set_grad_enabled(record):
            new = math.cast(new, self.dtype)
    self._device.xp.copyto(self._data, new._data, casting="unsafe")
    self._bump_version()
    if record:
        self._node, self.requires_grad = new._node, True
        if new._node is not None:
            new._node.rebind_output(self)
    if tracer is not None:
        tracer.on_inplace(self, new)
    return self


def _inplace(fn: Callable) -> Callable:
    def method(self: Tensor, other: Any = None, *args: Any, **kwargs: Any) -> Tensor:
        if other is None and not args:
            return apply_inplace(self, lambda old: fn(old, **kwargs))
        return apply_inplace(self, lambda old: fn(old, other, *args, **kwargs), other)

    method.__name__ = fn.__name__ + "_"
    return method


for _name in ("add", "sub", "mul", "div", "pow", "clamp", "neg", "exp", "log", "sqrt", "tanh",
              "sigmoid", "relu", "abs", "masked_fill", "maximum", "minimum", "floor_divide", "remainder",
              "sin", "cos", *trig.__all__, "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"):
    setattr(Tensor, _name + "_", _inplace(_PLAIN[_name]))
Tensor.clamp_ = lambda self, min=None, max=None: apply_inplace(  # noqa: A002
    self, lambda old: math.clamp(old, min, max))
Tensor.__iadd__ = Tensor.add_
Tensor.__isub__ = Tensor.sub_
Tensor.__imul__ = Tensor.mul_
Tensor.__itruediv__ = Tensor.div_
Tensor.__ifloordiv__ = Tensor.floor_divide_
Tensor.__imod__ = Tensor.remainder_
Tensor.__iand__ = Tensor.bitwise_and_
Tensor.__ior__ = Tensor.bitwise_or_
Tensor.__ixor__ = Tensor.bitwise_xor_


# zero_/fill_/copy_ are where(True, new, old): on a tensor in a graph the result stays in
# the graph (old gets a zero gradient, a tensor `value`/`src` gets its gradient), as in PyTorch.
def _overwrite(old: Tensor, value: Any) -> Tensor:
    if isinstance(value, Tensor) and value._data.dtype != old._data.dtype:
        value = math.cast(value, old.dtype)
    elif not isinstance(value, Tensor) and old._data.dtype.kind != "f" and isinstance(value, float):
        value = int(value) if old._data.dtype.kind == "i" else bool(value)
    return math.where(True, value, old)


def _zero_(self: Tensor) -> Tensor:
    return apply_inplace(self, lambda old: _overwrite(old, 0))


def _fill_(self: Tensor, value: Any) -> Tensor:
    """Set every element to `value`; an integer tensor that cannot hold it raises, as in PyTorch."""
    if self._data.dtype.kind == "i":
        check_fits(value, self.dtype, "fill_")
    return apply_inplace(self, lambda old: _overwrite(old, value), value)


def _copy_(self: Tensor, src: Any) -> Tensor:
    return apply_inplace(self, lambda old: _overwrite(old, src), src)


def _setitem(self: Tensor, index: Any, value: Any) -> None:
    apply_inplace(self, lambda old: shape.setitem_value(old, index, value), value)


def _uniform_(self: Tensor, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Tensor:
    return apply_inplace(self, lambda old: creation.rand(*old.shape, dtype=old.dtype, generator=generator)
                         * (b - a) + a)


def _normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Tensor:
    return apply_inplace(self, lambda old: creation.randn(*old.shape, dtype=old.dtype, generator=generator)
                         * std + mean)


Tensor.zero_ = _zero_
Tensor.fill_ = _fill_
Tensor.copy_ = _copy_
Tensor.index_copy_ = lambda self, dim, index, source: apply_inplace(
    self, lambda old: shape.index_copy(old, dim, index, source), source)
Tensor.__setitem__ = _setitem
Tensor.uniform_ = _uniform_
Tensor.normal_ = _normal_


def _random_(self: Tensor, *bounds: Any, generator: Any = None, **named: Any) -> Tensor:
    """Fill with integers drawn uniformly from [from, to - 1]: ``random_(to)``, ``random_(from, to)``.

    Without bounds the range is every value of the dtype (``[0, 2**24]`` for float32 and the
    like, where every integer is exact), as in PyTorch. The old values get a zero gradient.

    >>> kiln.zeros(4, dtype=kiln.int64).random_(0, 10)
    """
    unknown = set(named) - {"from", "to"}
    if unknown or len(bounds) > 2:
        raise TypeError(f"random_() takes (to), (from, to) or from=/to=, got {len(bounds)} positional and "
                        f"{sorted(named)} named arguments")
    low, high = (None, bounds[0]) if len(bounds) == 1 else (bounds + (None, None))[:2]
    low, high = named.get("from", low), named.get("to", high)
    values = random_fill.random_values(self, low, high, generator)
    return apply_inplace(self, lambda old: _overwrite(old, math.cast(values, old.dtype)))


def _bernoulli_(self: Tensor, p: Any = 0.5, *, generator: Any = None) -> Tensor:
    """Fill with 1 (probability p: a number, or a float tensor that broadcasts to self) or 0.

    >>> kiln.zeros(2, 3).bernoulli_(0.25)
    """
    mask = random_fill.bernoulli_mask("bernoulli_", self, p, generator)
    return apply_inplace(self, lambda old: _overwrite(old, math.cast(mask, old.dtype)))


def _scatter_(self: Tensor, dim: int, index: Tensor, src: Any = None, *, value: Any = None,
              reduce: str | None = None) -> Tensor:
    """In-place `kiln.scatter`: write src (or a number `value`) into self at index along dim."""
    return apply_inplace(self, lambda old: scatters.scatter(old, dim, index, src, value=value, reduce=reduce),
                         src)


def _index_add_(self: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
    """In-place `kiln.index_add`: add ``alpha * source`` into self at index along dim."""
    return apply_inplace(self, lambda old: shape.index_add(old, dim, index, source, alpha=alpha), source)


def _scatter_add_(self: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """In-place `kiln.scatter_add`: add src into self at index along dim."""
    return apply_inplace(self, lambda old: shape.scatter_add(old, dim, index, src), src)


def _scatter_reduce_(self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,
                     include_self: bool = True) -> Tensor:
    """In-place `kiln.scatter_reduce`."""
    return apply_inplace(self, lambda old: scatters.scatter_reduce(old, dim, index, src, reduce,
                                                                   include_self=include_self), src)


def _bernoulli(self: Tensor, p: Any = None, *, generator: Any = None) -> Tensor:
    """`kiln.bernoulli(self, p)`: 0/1 draws, 1 with probability self (or p).

    >>> kiln.full((2, 2), 0.5).bernoulli()
    """
    return random_fill.bernoulli(self, p, generator=generator)


def _softmax(self: Tensor, dim: int, dtype: Any = None) -> Tensor:
    """softmax along dim (cast to `dtype` first when given).

    >>> kiln.randn(2, 3).softmax(-1).sum(-1)
    """
    return activations.softmax(self if dtype is None else math.cast(self, dtype), dim)


def _log_softmax(self: Tensor, dim: int, dtype: Any = None) -> Tensor:
    """log_softmax along dim (cast to `dtype` first when given)."""
    return activations.log_softmax(self if dtype is None else math.cast(self, dtype), dim)


Tensor.random_ = _random_
Tensor.bernoulli_ = _bernoulli_
Tensor.bernoulli = _bernoulli
Tensor.scatter_ = _scatter_
Tensor.scatter_add_ = _scatter_add_
Tensor.index_add_ = _index_add_
Tensor.scatter_reduce_ = _scatter_reduce_
Tensor.softmax = _softmax
Tensor.log_softmax = _log_softmax


# ---- sorting, sampling, tiling and closeness ----------------------------------------
for _name, _fn in {"sort": sorting.sort, "argsort": sorting.argsort, "topk": sorting.topk,
                   "unique": sorting.unique, "multinomial": sampling.multinomial, "repeat": tiling.repeat,
                   "tile": tiling.tile, "isclose": compare.isclose, "allclose": compare.allclose}.items():
    setattr(Tensor, _name, _method(_fn))


# ---- new_* constructors: same dtype and device as self unless given ------------------
def _new_full(self: Tensor, size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    """A tensor of `size` filled with `fill_value`, with self's dtype and device by default."""
    return creation.full(size, fill_value, dtype=dtype if dtype is not None else self.dtype,
                         device=device if device is not None else self.device, requires_grad=requires_grad)


def _new_filler(name: str, value: Any) -> Callable:
    def method(self: Tensor, *sizes: Any, size: Any = None, dtype: Any = None, device: Any = None,
               requires_grad: bool = False) -> Tensor:
        shape = creation.size_arg(sizes, size, name)
        return _new_full(self, shape, value, dtype=dtype, device=device, requires_grad=requires_grad)

    method.__name__ = name
    method.__doc__ = f"A tensor of the given size filled with {value}, with self's dtype and device by default."
    return method


def _new_tensor(self: Tensor, data: Any, dtype: Any = None, device: Any = None,
                requires_grad: bool = False) -> Tensor:
    """A copy of `data` as a tensor with self's dtype and device by default (PyTorch's new_tensor)."""
    from .tensor import tensor  # noqa: PLC0415

    return tensor(data, dtype=dtype if dtype is not None else self.dtype,
                  device=device if device is not None else self.device, requires_grad=requires_grad)


Tensor.new_full = _new_full
Tensor.new_zeros = _new_filler("new_zeros", 0)
Tensor.new_ones = _new_filler("new_ones", 1)
Tensor.new_empty = _new_filler("new_empty", 0)  # zero-filled, as kiln.empty
Tensor.new_tensor = _new_tensor
Tensor.data = property(tensor_data.get_data, tensor_data.set_data, doc=tensor_data.get_data.__doc__)
Tensor.__format__ = tensor_data.format_tensor


def _bfloat16(self: Tensor) -> Tensor:
    """This tensor as kiln.bfloat16 (needs the optional ml_dtypes package)."""
    return self.to("bfloat16")


Tensor.bfloat16 = _bfloat16
