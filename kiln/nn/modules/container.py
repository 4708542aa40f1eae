"""``kiln.nn.modules.container``: the classes PyTorch defines in ``torch.nn.modules.container``."""
from ..container import ModuleDict, ModuleList, Sequential

__all__ = ["ModuleDict", "ModuleList", "Sequential"]
