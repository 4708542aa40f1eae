"""kiln.save and kiln.load: state dicts to and from safetensors files.

No pickle is ever written or read, so loading a file from the internet cannot run code.
A PyTorch state dict saved with ``safetensors.torch.save_file`` loads into the kiln
model with the same layer names.

>>> model = kiln.models.mlp()
>>> kiln.save(model, "mlp.safetensors")            # or kiln.save(model.state_dict(), ...)
>>> model.load_state_dict(kiln.load("mlp.safetensors"))
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from ..tensor import Tensor, _to_host, from_numpy
from .safetensors import read_arrays, read_metadata, write_arrays

__all__ = ["save", "load", "load_metadata"]


def save(obj: Any, path: str | os.PathLike, metadata: Mapping[str, str] | None = None) -> None:
    """Save a state dict (names -> tensors or arrays), or a Module's state_dict, as safetensors.

    Tensors are written in C order and little-endian; views and tied weights are
    written as independent copies. `metadata` is an optional dict of strings
    stored in the header (read it back with ``kiln.io.load_metadata``).

    >>> kiln.save({"w": kiln.ones(2, 3)}, "w.safetensors", metadata={"epoch": "3"})
    """
    arrays = {name: _to_array(name, value) for name, value in _state_of(obj).items()}
    write_arrays(arrays, path, metadata)


def load(path: str | os.PathLike, device: Any = None) -> dict[str, Tensor]:
    """Read a safetensors file into a dict of tensors (in the file's name order).

    Raises FileNotFoundError for a missing file and ``kiln.io.SafetensorsError``
    (a ValueError) for a file that is not safetensors or holds a dtype kiln lacks.

    >>> state = kiln.load("mlp.safetensors")
    >>> model.load_state_dict(state)
    """
    arrays, _ = read_arrays(path)
    tensors = {name: from_numpy(array) for name, array in arrays.items()}
    if device is not None:
        tensors = {name: t.to(device) for name, t in tensors.items()}
    return tensors


def load_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The metadata dict stored by ``kiln.save(..., metadata=...)`` (empty if none); reads the header only."""
    return read_metadata(path)


def _state_of(obj: Any) -> Mapping[str, Any]:
    from ..nn.module import Module  # noqa: PLC0415 - kiln.nn imports kiln.tensor, which this module also needs

    if isinstance(obj, Module):
        return obj.state_dict()
    if isinstance(obj, Mapping):
        for name in obj:
            if not isinstance(name, str):
                raise TypeError(f"kiln.save: state dict keys must be str, got {name!r} "
                                f"({type(name).__name__})")
        return obj
    raise TypeError(f"kiln.save expects a state dict (a mapping of names to tensors) or an nn.Module, "
                    f"got {type(obj).__name__}; for a single tensor use kiln.save({{'name': tensor}}, path)")


def _to_array(name: str, value: Any) -> np.ndarray:
    if isinstance(value, Tensor):
        return _to_host(value._data)
    if isinstance(value, np.ndarray):
        return value
    raise TypeError(f"kiln.save: value of {name!r} is a {type(value).__name__}, expected a kiln.Tensor "
                    "or a numpy.ndarray (convert other arrays with kiln.from_dlpack or numpy.asarray)")
