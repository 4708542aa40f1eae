"""``kiln.nn.modules.batchnorm``: the classes PyTorch defines in ``torch.nn.modules.batchnorm``."""
from ..batchnorm import BatchNorm1d, BatchNorm2d
from ..batchnorm import _BatchNorm  # noqa: F401 - a private base scripts import from here

__all__ = ["BatchNorm1d", "BatchNorm2d"]
