"""``kiln.nn.modules.instancenorm``: the classes PyTorch defines in ``torch.nn.modules.instancenorm``."""
from ..batchnorm import _NormBase  # noqa: F401 - the private base, where PyTorch's file has it too
from ..instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from ..instancenorm import _InstanceNorm  # noqa: F401 - a private base scripts import from here

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]
