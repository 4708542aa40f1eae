"""Datasets and batching: `Dataset`, `TensorDataset`, `DataLoader`, and the bundled digits.

>>> from kiln.data import DataLoader, load_digits
>>> images, labels = load_digits("train")          # (1438, 1, 8, 8) float32, (1438,) int64
>>> loader = DataLoader((images, labels), batch_size=64, shuffle=True, seed=0)
>>> for x, y in loader: ...
"""
from .dataset import Dataset, TensorDataset
from .digits import DIGITS_PATH, load_digits
from .loader import DataLoader, default_collate

__all__ = ["DIGITS_PATH", "DataLoader", "Dataset", "TensorDataset", "default_collate", "load_digits"]
