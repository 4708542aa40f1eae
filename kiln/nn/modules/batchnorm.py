"""``kiln.nn.modules.batchnorm``: the classes PyTorch defines in ``torch.nn.modules.batchnorm``."""
from ..batchnorm import BatchNorm1d, BatchNorm2d
from ..batchnorm import _BatchNorm, _NormBase  # noqa: F401 - private bases scripts import from here

__all__ = ["BatchNorm1d", "BatchNorm2d"]
