"""``kiln.nn.modules.container``: the classes PyTorch defines in ``torch.nn.modules.container``."""
from ..container import ModuleDict, ModuleList, Sequential
from ..parameter_container import ParameterDict, ParameterList

__all__ = ["ModuleDict", "ModuleList", "ParameterDict", "ParameterList", "Sequential"]
