"""``kiln.nn.modules.linear``: the classes PyTorch defines in ``torch.nn.modules.linear``."""
from ..linear import Bilinear, Identity, Linear

__all__ = ["Bilinear", "Identity", "Linear"]
