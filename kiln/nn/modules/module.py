"""``kiln.nn.modules.module``: the classes PyTorch defines in ``torch.nn.modules.module``."""
from ..module import Module

__all__ = ["Module"]
