"""PyTorch-shaped utility namespaces: `kiln.utils.data` (datasets, samplers, DataLoader)."""
from . import data

__all__ = ["data"]
