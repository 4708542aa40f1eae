"""Turning samples into batches: `default_collate` (stack) and `default_convert` (no batching)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...tensor import Tensor, from_numpy


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


def _same_mapping(like: Mapping, values: dict) -> Mapping:
    """`values` as the mapping type of `like` where that type can be built from a dict, else a dict."""
    if type(like) is dict:
        return values
    try:
        return type(like)(values)
    except TypeError:
        return values


def _stack_tensors(samples: Sequence[Tensor]) -> Tensor:
    first = samples[0]
    shapes = {tuple(s.shape) for s in samples}
    if len(shapes) != 1:
        raise ValueError(f"default_collate: tensors in a batch must have the same shape, got shapes "
                         f"{sorted(shapes)}; pad them (kiln.nn.utils.rnn.pad_sequence) or pass collate_fn= "
                         "to DataLoader")
    xp = first._device.xp
    return Tensor._wrap(xp.stack([s.detach()._data for s in samples]), first._device)


def default_collate(samples: Sequence[Any]) -> Any:
    """Stack a list of samples into a batch: tuples/lists/dicts field by field, leaves into tensors.

    Tensors, NumPy arrays and Python numbers are stacked along a new first dimension
    (Python floats become float32, ints int64, as `kiln.tensor` would make them);
    strings and bytes stay a list. 0-d samples stack to shape ``(B,)``.

    >>> default_collate([(kiln.ones(3), 0), (kiln.zeros(3), 1)])
    (tensor of shape (2, 3), tensor([0, 1]))
    """
    if not isinstance(samples, Sequence) or isinstance(samples, (str, bytes)):
        raise TypeError(f"default_collate expects a list of samples, got {type(samples).__name__}")
    if not samples:
        raise ValueError("default_collate: got an empty list of samples")
    first = samples[0]
    if isinstance(first, Tensor):
        return _stack_tensors(samples)
    if isinstance(first, (np.ndarray, np.generic)) and first.dtype.kind not in "OSUV":
        arrays = [np.asarray(s) for s in samples]
        if len({a.shape for a in arrays}) != 1:
            raise ValueError(f"default_collate: arrays in a batch must have the same shape, got shapes "
                             f"{sorted({a.shape for a in arrays})}; pass collate_fn= to DataLoader")
        return from_numpy(np.stack(arrays))  # integers kiln lacks (uint8 images) widen to int64
    if isinstance(first, bool):
        return Tensor._wrap(np.asarray(samples, dtype=np.bool_))
    if isinstance(first, int):
        return Tensor._wrap(np.asarray(samples, dtype=np.int64))
    if isinstance(first, float):
        return Tensor._wrap(np.asarray(samples, dtype=np.float32))
    if isinstance(first, (str, bytes)):
        return list(samples)
    if isinstance(first, Mapping):
        return _same_mapping(first, {key: default_collate([s[key] for s in samples]) for key in first})
    if _is_namedtuple(first):
        return type(first)(*(default_collate(list(field)) for field in zip(*samples)))
    if isinstance(first, (tuple, list)):
        if any(len(s) != len(first) for s in samples):
            raise ValueError("default_collate: samples have different numbers of fields, e.g. "
                             f"{len(first)} and {len(next(s for s in samples if len(s) != len(first)))}; "
                             "each sample must have the same structure")
        fields = [default_collate(list(field)) for field in zip(*samples)]
        return tuple(fields) if isinstance(first, tuple) else fields
    raise TypeError(f"default_collate: don't know how to batch samples of type {type(first).__name__}; "
                    "return tensors, arrays, numbers, strings, or tuples/lists/dicts of them, or pass "
                    "collate_fn= to DataLoader")


def default_convert(data: Any) -> Any:
    """Convert NumPy arrays (inside tuples/lists/dicts too) to tensors, without batching.

    The collate function of a ``DataLoader(..., batch_size=None)``.
    """
    if isinstance(data, Tensor):
        return data
    if isinstance(data, np.ndarray):
        return data if data.dtype.kind in "OSUV" else from_numpy(data)
    if isinstance(data, np.generic):
        return data if data.dtype.kind in "OSUV" else from_numpy(np.asarray(data))
    if isinstance(data, Mapping):
        return _same_mapping(data, {key: default_convert(value) for key, value in data.items()})
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return tuple(default_convert(d) for d in data)
    if isinstance(data, list):
        return [default_convert(d) for d in data]
    return data
