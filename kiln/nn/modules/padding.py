"""``kiln.nn.modules.padding``: the classes PyTorch defines in ``torch.nn.modules.padding``."""
from ..padding import (CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d, ConstantPad2d, ConstantPad3d,
                       ReflectionPad1d, ReflectionPad2d, ReflectionPad3d, ReplicationPad1d, ReplicationPad2d,
                       ReplicationPad3d, ZeroPad1d, ZeroPad2d, ZeroPad3d)
from ..padding import (_CircularPadNd, _ConstantPadNd, _ReflectionPadNd,  # noqa: F401 - private bases
                       _ReplicationPadNd)

__all__ = [
    "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d",
    "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
    "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
]
