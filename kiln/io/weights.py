"""kiln.save and kiln.load: state dicts and whole training checkpoints, as safetensors files.

A flat state dict is written as a plain safetensors file: a PyTorch state dict saved with
``safetensors.torch.save_file`` loads into the kiln model with the same layer names, and
back. A checkpoint (nested dicts, lists and tuples of tensors, arrays and Python scalars)
keeps its tensors in the same format and its structure as JSON in the file's metadata:
loading it cannot run code. Anything else (a whole module, an optimizer, an object) is
pickled, as PyTorch does, and loading it needs ``weights_only=False`` (see kiln.io.pickled).

>>> kiln.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, "ckpt.safetensors")
>>> ckpt = kiln.load("ckpt.safetensors")
>>> model.load_state_dict(ckpt["model"]); opt.load_state_dict(ckpt["optimizer"])
"""
from __future__ import annotations

import json
import os
from typing import Any, BinaryIO, Mapping

import numpy as np

from ..tensor import Tensor, _to_host, from_numpy
from .checkpoint import CHECKPOINT_KEY, NotATreeError, flatten, is_flat_state_dict, shares_memory, unflatten
from .pickled import PICKLE_KEY, check_allowed, dump, load_object
from .safetensors import _stream_name, is_file_object, read_arrays, read_metadata, write_arrays

__all__ = ["save", "load", "load_metadata"]


def save(obj: Any, f: str | os.PathLike | BinaryIO, metadata: Mapping[str, str] | None = None, *,
         pickle_protocol: int | None = None) -> None:
    """Save a state dict, a training checkpoint or a whole object to a path or a binary file object.

    `obj` is a tensor, or dicts, lists and tuples (nested freely) of tensors, NumPy
    arrays, str, int, float, bool and None: ``model.state_dict()``,
    ``optimizer.state_dict()``, or ``{"model": ..., "optimizer": ..., "iter": 100,
    "config": {...}}``. Tensors are written by value (C order, little-endian); a tensor
    that appears twice (tied weights) is stored once and comes back as one tensor, and
    tensors that share memory (views of one another) are stored once and come back as
    views sharing memory, as ``torch.load`` gives them back. NumPy arrays come back as
    arrays. A state dict of tensors without such sharing is a plain safetensors file.
    Containers nest at most ``kiln.io.checkpoint.MAX_DEPTH`` deep; a deeper `obj` raises
    ``kiln.io.CheckpointError``. A path is replaced atomically; a file object
    (``open(p, "wb")``, ``io.BytesIO``) is written at its position and need not be
    seekable. `metadata` is an optional dict of strings stored in the header (read it
    back with ``kiln.io.load_metadata``).

    Anything else (a whole module, an optimizer, a custom object, a set) is pickled with
    protocol `pickle_protocol`, its tensors and arrays still stored as tensors of the file;
    loading it runs code from the file, so it needs ``kiln.load(f, weights_only=False)``.
    Prefer saving ``model.state_dict()``.

    >>> kiln.save({"model": model.state_dict(), "step": 100}, "ckpt.safetensors")
    >>> kiln.save(model, "model.pt")  # pickled: kiln.load("model.pt", weights_only=False)
    """
    header = dict(_user_metadata(metadata))
    if not isinstance(f, (str, os.PathLike)) and not is_file_object(f, "write"):
        raise TypeError(f"kiln.save: f must be a path (str or os.PathLike) or a binary file object with write(), "
                        f"got {type(f).__name__}")
    if is_flat_state_dict(obj) and not shares_memory(list(obj.values())):
        arrays = {name: _array(value) for name, value in obj.items()}
    else:
        try:
            arrays, structure = flatten(obj)
            header[CHECKPOINT_KEY] = json.dumps(structure, separators=(",", ":"), allow_nan=False)
        except NotATreeError as why:
            arrays, header[PICKLE_KEY] = dump(obj, why, pickle_protocol)
    write_arrays(arrays, f, header or None)


def load(f: str | os.PathLike | BinaryIO, device: Any = None, *, map_location: Any = None,
         weights_only: bool | None = True) -> Any:
    """Read what `kiln.save` wrote, from a path or a binary file object.

    A state dict comes back as a dict of tensors (in the file's name order); a
    checkpoint comes back with its structure: dicts (keys in saved order), lists,
    tuples, numbers, strings and None as saved, every tensor as a fresh kiln tensor
    and every NumPy array as an array. `device` (or PyTorch's spelling `map_location`)
    moves the tensors there. Loading these cannot run code.

    A pickled object (a whole module saved with ``kiln.save(model, f)``) runs code from
    the file when unpickled: with ``weights_only=True`` (the default; None means the same)
    it loads only if every class and function it names is allowed (see
    ``kiln.serialization.add_safe_globals``), else ``kiln.io.PickledCheckpointError``
    says what it needs. Pass ``weights_only=False`` for a file you trust.

    Raises FileNotFoundError for a missing file and ``kiln.io.SafetensorsError``
    (a ValueError) for a file that is not safetensors or holds a dtype kiln lacks.

    >>> ckpt = kiln.load("ckpt.safetensors", map_location="cpu")
    >>> model.load_state_dict(ckpt["model"])
    >>> model = kiln.load("model.pt", weights_only=False)  # a whole module, from a trusted file
    """
    device = _device_arg(device, map_location)
    if weights_only is None:
        weights_only = True
    if not isinstance(weights_only, bool):
        raise TypeError(f"kiln.load: weights_only must be True, False or None, got {weights_only!r}")
    if not isinstance(f, (str, os.PathLike)) and not is_file_object(f, "read"):
        raise TypeError(f"kiln.load: f must be a path (str or os.PathLike) or a binary file object with read(), "
                        f"got {type(f).__name__}")
    source = _stream_name(f) if is_file_object(f, "read") else repr(os.fspath(f))
    if weights_only and not is_file_object(f, "read"):
        pickled = read_metadata(f).get(PICKLE_KEY)
        if pickled is not None:
            check_allowed(pickled, source)  # refuse from the header alone, before reading the tensors
    arrays, metadata = read_arrays(f)
    pickled = metadata.get(PICKLE_KEY)
    if pickled is not None:
        return load_object(pickled, arrays, source, device, weights_only)
    text = metadata.get(CHECKPOINT_KEY)
    if text is None:
        tensors = {name: from_numpy(array) for name, array in arrays.items()}
        return tensors if device is None else {name: t.to(device) for name, t in tensors.items()}
    return unflatten(text, arrays, source, device)


def load_metadata(f: str | os.PathLike | BinaryIO) -> dict[str, str]:
    """The metadata dict stored by ``kiln.save(..., metadata=...)`` (empty if none); reads the header only."""
    metadata = read_metadata(f)
    return {k: v for k, v in metadata.items() if k not in (CHECKPOINT_KEY, PICKLE_KEY)}


def _user_metadata(metadata: Mapping[str, str] | None) -> Mapping[str, str]:
    if metadata is None:
        return {}
    for key in (CHECKPOINT_KEY, PICKLE_KEY):
        if isinstance(metadata, Mapping) and key in metadata:
            raise ValueError(f"kiln.save: metadata key {key!r} is reserved for the checkpoint structure; "
                             "use another key")
    return metadata  # write_arrays checks that it maps str to str


def _device_arg(device: Any, map_location: Any) -> Any:
    if device is not None and map_location is not None:
        raise TypeError("kiln.load: pass device or map_location, not both")
    target = device if device is not None else map_location
    if target is not None and (callable(target) or isinstance(target, Mapping)):
        raise TypeError(f"kiln.load: map_location must be a device (e.g. 'cpu' or kiln.device('cuda')), got a "
                        f"{type(target).__name__}; kiln does not remap storages one by one. Fix: pass the device "
                        "to load everything onto")
    return target


def _array(value: Any) -> np.ndarray:
    if isinstance(value, Tensor):
        return _to_host(value._data)
    return value
