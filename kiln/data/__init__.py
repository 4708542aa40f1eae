"""The bundled digits, plus the data utilities of `kiln.utils.data` under a short name.

`kiln.utils.data` is the home of `Dataset`, `TensorDataset`, `DataLoader`, the samplers
and `random_split` (PyTorch's ``torch.utils.data``); ``kiln.data`` offers the same objects.

>>> from kiln.data import DataLoader, load_digits
>>> images, labels = load_digits("train")          # (1438, 1, 8, 8) float32, (1438,) int64
>>> loader = DataLoader((images, labels), batch_size=64, shuffle=True, seed=0)
>>> for x, y in loader: ...
"""
from ..utils.data import *  # noqa: F403 - one implementation, two names
from ..utils.data import __all__ as _utils_all
from .digits import DIGITS_PATH, load_digits

__all__ = ["DIGITS_PATH", "load_digits", *_utils_all]
