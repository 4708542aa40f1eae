"""Gradients of a convolution by themselves, with PyTorch's names (``kiln.nn.grad``).

``conv2d_input`` and ``conv2d_weight`` give what ``backward`` would put in an image's and a
weight's ``.grad`` for a given output gradient, without running the forward pass; they are the
conv2d_input_grad and conv2d_weight_grad primitives (kiln/ops/conv.py) that conv2d's own
backward uses, so they are differentiable again and compile like any op.

>>> x, w = kiln.randn(2, 3, 8, 8), kiln.randn(4, 3, 3, 3)
>>> g = kiln.ones(2, 4, 8, 8)
>>> kiln.nn.grad.conv2d_weight(x, w.shape, g, padding=1).shape
(4, 3, 3, 3)
"""
from __future__ import annotations

from typing import Any, Sequence

from .. import autograd
from ..functional.creation import zeros
from ..functional.layers import _pair, conv2d
from ..ops.conv import image_grad, weight_grad
from ..ops.primitive import ShapeError
from ..tensor import Tensor

__all__ = ["conv2d_input", "conv2d_weight"]


def _geometry(name: str, stride: Any, padding: Any, dilation: Any) -> dict:
    if isinstance(padding, str):
        raise ValueError(f"{name}: padding must be an int or a pair (as the forward's numbers), got {padding!r}")
    return {"stride": _pair(stride, "stride"), "padding": _pair(padding, "padding"),
            "dilation": _pair(dilation, "dilation")}


def _sizes(name: str, sizes: Sequence[int], what: str) -> tuple[int, ...]:
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) != 4:
        raise ShapeError(f"{name}: {what} must name 4 sizes (N, C, H, W) or (O, C, kh, kw), got {sizes}")
    return sizes


def conv2d_input(input_size: Sequence[int], weight: Tensor, grad_output: Tensor, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """The gradient of conv2d's input of shape `input_size` (N, C, H, W), given `weight` and the output's
    gradient `grad_output` (N, O, OH, OW)."""
    size = _sizes("conv2d_input", input_size, "input_size")
    params = _geometry("conv2d_input", stride, padding, dilation)
    if groups != 1:
        image = zeros(size, dtype=weight.dtype, requires_grad=True)
        return _grouped(image, weight, grad_output, groups, params, image)
    return image_grad(grad_output, weight, size, params)


def conv2d_weight(input: Tensor, weight_size: Sequence[int], grad_output: Tensor, stride: Any = 1,  # noqa: A002
                  padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """The gradient of conv2d's weight of shape `weight_size` (O, C/groups, kh, kw), given the `input`
    image and the output's gradient `grad_output`."""
    size = _sizes("conv2d_weight", weight_size, "weight_size")
    params = _geometry("conv2d_weight", stride, padding, dilation)
    if groups != 1:
        weight = zeros(size, dtype=input.dtype, requires_grad=True)
        return _grouped(input, weight, grad_output, groups, params, weight)
    return weight_grad(input, grad_output, size, params)


def _grouped(image: Tensor, weight: Tensor, grad_output: Tensor, groups: int, params: dict, wrt: Tensor) -> Tensor:
    """A grouped convolution's gradient with respect to `wrt` (its image or weight, a zero leaf: conv2d is
    linear in each), by differentiating the convolution itself."""
    with autograd.enable_grad():
        out = conv2d(image, weight, None, params["stride"], params["padding"], params["dilation"], groups)
    (grad,) = autograd.grad(out, wrt, grad_output, create_graph=autograd.is_grad_enabled())
    return grad
