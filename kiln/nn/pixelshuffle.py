"""PixelShuffle and PixelUnshuffle: trade channels for spatial resolution (sub-pixel convolution)."""
from __future__ import annotations

from ..functional.pixelshuffle import pixel_shuffle, pixel_unshuffle
from ..tensor import Tensor
from .module import Module


class PixelShuffle(Module):
    """(*, C * r * r, H, W) -> (*, C, H * r, W * r) with r = `upscale_factor`.

    >>> kiln.nn.PixelShuffle(3)(kiln.randn(1, 9, 4, 4)).shape
    (1, 1, 12, 12)
    """

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """(*, C, H * r, W * r) -> (*, C * r * r, H, W) with r = `downscale_factor`: undoes PixelShuffle.

    >>> kiln.nn.PixelUnshuffle(3)(kiln.randn(1, 1, 12, 12)).shape
    (1, 9, 4, 4)
    """

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"
