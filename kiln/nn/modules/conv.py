"""``kiln.nn.modules.conv``: the classes PyTorch defines in ``torch.nn.modules.conv``."""
from ..conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from ..conv import _ConvNd, _ConvTransposeNd  # noqa: F401 - private bases scripts import from here

__all__ = ["Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d"]
