"""``kiln.nn.modules.pixelshuffle``: the classes PyTorch defines in ``torch.nn.modules.pixelshuffle``."""
from ..pixelshuffle import PixelShuffle, PixelUnshuffle

__all__ = ["PixelShuffle", "PixelUnshuffle"]
