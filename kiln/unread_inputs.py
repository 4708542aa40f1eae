"""What a backward node keeps of the inputs its VJP does not read: their shape, not their memory.

A `Node` (autograd.py) needs every input's metadata for its VJP (an addition's gradient is
summed back to each input's shape) but only the values of the inputs its primitive lists in
``saves_inputs`` (narrowed per call by ``Primitive.saved_inputs``). Holding the others would
keep every intermediate of a forward pass alive until backward: at ResNet-18's sizes that held
about seven activation-sized arrays per convolution where two are needed. So the node holds,
in place of such an input, a tensor whose array is a `ShapeOnly`: its shape and dtype, and no
elements. PyTorch's backward nodes keep the same: the tensors they save, and sizes for the rest.

A VJP that reads the values of an input it does not declare fails loudly (`UnsavedInputError`),
never silently: a ShapeOnly refuses NumPy's ufuncs and conversion to an array, and has no
other attribute.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import late_bound
from .shaped import Shaped
from .trace_state import trace_state as _trace_state

if TYPE_CHECKING:
    from .ops.primitive import Primitive


class UnsavedInputError(RuntimeError):
    """A VJP read the values of an input its primitive does not list in ``saves_inputs``."""


class ShapeOnly(Shaped):
    """The shape and dtype of an array whose values were not kept, for a backward node's input (`index`; -1
    for the output of a traced node, jit/autodiff.py)."""

    __slots__ = ("shape", "dtype", "prim", "index")
    __array_ufunc__ = None  # NumPy's ufuncs refuse it instead of reading it

    def __init__(self, shape: tuple, dtype: Any, prim: Primitive, index: int) -> None:
        self.shape, self.dtype, self.prim, self.index = shape, dtype, prim, index

    def refusal(self) -> UnsavedInputError:
        """The error that names the primitive whose VJP read this input, and the fix."""
        return UnsavedInputError(
            f"{self.prim.name} ({'output' if self.index < 0 else f'input {self.index}'}): its VJP read the values "
            "of this tensor, which its primitive does not save. Fix: list the input in the primitive's saves_inputs "
            "(set saves_output for its output).")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise self.refusal()

    def __getitem__(self, key: Any) -> Any:
        raise self.refusal()

    def __getattr__(self, name: str) -> Any:  # only for attributes not set above
        raise self.refusal()

    def __repr__(self) -> str:
        return f"ShapeOnly(shape={self.shape}, dtype={self.dtype})"


_new = object.__new__


def kept_inputs(prim: Primitive, inputs: tuple, saves: tuple[int, ...]) -> tuple:
    """`inputs` as a node of `prim` keeps them: intermediates that require grad (the arrays a forward
    pass makes) as tensors of the same shape, dtype, device and requires_grad whose array is a
    `ShapeOnly`, unless the VJP reads them (`saves`: ``prim.saved_inputs(inputs)``), their own node reads them
    (``saves_output``: ``Node.output`` holds only a weak reference, so the consumers keep them
    alive), or they are integers or bools (indices and masks, which VJPs read to route gradients).
    Leaves and tensors that need no grad are kept as they are: the caller holds them anyway.

    While kiln.jit traces, a stand-in is the same traced value as the input it replaces (so a
    traced backward sees that value, with its symbolic shape); while djit records, every input is
    kept."""
    if _trace_state.lazy is not None:
        return inputs
    tracer = _trace_state.tracer
    kept = None
    for i, t in enumerate(inputs):
        node = t._node
        if node is None or node.prim.saves_output or i in saves:
            continue
        data = t._data
        if data.__class__ is ShapeOnly or data.dtype.kind in "biu":
            continue
        stand_in = _new(late_bound.Tensor)
        stand_in._data = ShapeOnly(data.shape, data.dtype, prim, i)
        stand_in._device = t._device
        stand_in.requires_grad = True
        if tracer is not None and not tracer.stand_in_for(t, stand_in):
            continue
        if kept is None:
            kept = list(inputs)
        kept[i] = stand_in
    return inputs if kept is None else tuple(kept)
