"""Checkpoint trees: nested dicts, lists and tuples of tensors and Python scalars, without pickle.

``flatten`` splits a tree into the arrays it holds (named by their path, e.g.
``optimizer.state.0.exp_avg``) and a JSON description of everything else; ``unflatten``
puts it back together. The arrays go into a safetensors file and the JSON into its
metadata, so a checkpoint is still an ordinary safetensors file that any reader opens.

The JSON is ``{"version": 1, "tree": node}``, a node being one of::

    null, true, false, 3, 2.5, "text"      None, bool, int, float (finite), str
    {"float": "nan" | "inf" | "-inf"}      a float JSON cannot spell
    {"tensor": "name"}                     a tensor (or NumPy array) stored under that name
    {"list": [node, ...]}                  a list
    {"tuple": [node, ...]}                 a tuple
    {"dict": [[key, value], ...]}          a dict, in order; keys are str, int, float, bool or None
    {"ordered_dict": [...]}, {"counter": [...]}   an OrderedDict or a Counter, as "dict"

Other dict subclasses are saved as plain dicts.

>>> arrays, tree = flatten({"model": {"w": kiln.ones(2)}, "step": 3})
>>> sorted(arrays), tree
(['model.w'], {'version': 1, 'tree': {'dict': [['model', {'dict': [['w', {'tensor': 'model.w'}]]}], ['step', 3]]}})
"""
from __future__ import annotations

import json
import math
from collections import Counter, OrderedDict
from typing import Any, Callable

import numpy as np

from ..tensor import Tensor, _to_host

__all__ = ["CHECKPOINT_KEY", "FORMAT_VERSION", "CheckpointError", "flatten", "unflatten", "is_flat_state_dict"]

CHECKPOINT_KEY = "kiln.checkpoint"  # the safetensors metadata entry that holds the tree
FORMAT_VERSION = 1
_KEY_TYPES = (str, int, float, bool, type(None))
_SUPPORTED = ("kiln tensors, NumPy arrays, dicts, lists, tuples, str, int, float, bool and None")


class CheckpointError(ValueError):
    """The checkpoint structure stored in a file is not one kiln wrote (or can read)."""


def is_flat_state_dict(obj: Any) -> bool:
    """A dict of str names to tensors/arrays: saved as a plain safetensors file, as before checkpoints."""
    return (isinstance(obj, dict) and all(isinstance(k, str) for k in obj)
            and all(isinstance(v, (Tensor, np.ndarray)) for v in obj.values()) and "__metadata__" not in obj)


# ---- saving -------------------------------------------------------------------------------
def flatten(obj: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays by name, the JSON-ready tree) of a checkpoint object; TypeError names a bad leaf's path."""
    arrays: dict[str, np.ndarray] = {}
    names_by_array: dict[int, str] = {}  # id of an array -> its name: shared (tied) tensors are stored once
    keep: list[Any] = []  # holds the arrays named in names_by_array, so their ids stay unique

    def store(path: list[Any], value: Any) -> dict[str, str]:
        array = _to_host(value._data) if isinstance(value, Tensor) else value
        found = names_by_array.get(id(array))
        if found is not None:
            return {"tensor": found}
        name = _unique_name(".".join(map(str, path)) or "tensor", arrays)
        arrays[name] = array
        names_by_array[id(array)] = name
        keep.append(array)
        return {"tensor": name}

    def encode(value: Any, path: list[Any], parents: tuple[int, ...]) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return int(value)  # an int subclass (IntEnum) is saved as its value
        if isinstance(value, float):
            return float(value) if math.isfinite(value) else {"float": repr(float(value))}
        if isinstance(value, (Tensor, np.ndarray)):
            return store(path, value)
        if isinstance(value, np.generic):
            return encode(value.item(), path, parents)  # NumPy scalars become Python numbers
        if isinstance(value, (dict, list, tuple)):
            if id(value) in parents:
                raise ValueError(f"kiln.save: {_where(path)} contains itself; a checkpoint must be a tree")
            inner = parents + (id(value),)
            if isinstance(value, dict):
                kind = "counter" if isinstance(value, Counter) else "ordered_dict" if isinstance(value, OrderedDict) \
                    else "dict"
                return {kind: [[_encode_key(k, path), encode(v, path + [k], inner)] for k, v in value.items()]}
            items = [encode(v, path + [i], inner) for i, v in enumerate(value)]
            return {"tuple" if isinstance(value, tuple) else "list": items}
        raise TypeError(_unsupported(value, path))

    tree = encode(obj, [], ())
    return arrays, {"version": FORMAT_VERSION, "tree": tree}


def _encode_key(key: Any, path: list[Any]) -> Any:
    if isinstance(key, np.generic):
        key = key.item()
    if not isinstance(key, _KEY_TYPES):
        raise TypeError(f"kiln.save: a key of {_where(path)} is {key!r} ({type(key).__name__}); checkpoint dict "
                        "keys must be str, int, float, bool or None. Fix: convert the key, e.g. str(key)")
    if isinstance(key, float) and not math.isfinite(key):
        return {"float": repr(key)}
    return key


def _unique_name(name: str, taken: dict[str, Any]) -> str:
    """`name`, or `name#2`, `name#3`... when another path already spelled the same name."""
    if name not in taken and name != "__metadata__":
        return name
    n = 2
    while f"{name}#{n}" in taken:
        n += 1
    return f"{name}#{n}"


def _where(path: list[Any]) -> str:
    return "checkpoint" + "".join(f"[{p!r}]" for p in path)


def _unsupported(value: Any, path: list[Any]) -> str:
    from ..nn.module import Module  # noqa: PLC0415 - kiln.nn imports kiln.io's neighbours

    what = type(value).__name__
    if isinstance(value, Module) or callable(getattr(value, "state_dict", None)):
        if isinstance(value, Module) or hasattr(value, "parameters"):
            kind, name = "a module", "model"
        else:
            kind, name = "an object", "optimizer" if hasattr(value, "param_groups") else "obj"
        return (f"kiln.save: {_where(path)} is {kind} ({what}); kiln saves state, never pickled objects. "
                f"Fix: save its state_dict, e.g. kiln.save({name}.state_dict(), path), and restore it with "
                f"{name}.load_state_dict(kiln.load(path)) into a freshly built {what}")
    if hasattr(value, "__dlpack__") or hasattr(value, "__array__"):
        fix = "convert it with kiln.from_dlpack(x) or numpy.asarray(x)"
    else:
        fix = "convert it to one of those first (a config object: its fields as a dict)"
    return (f"kiln.save: {_where(path)} is a {what}; a checkpoint holds {_SUPPORTED} (kiln never pickles). "
            f"Fix: {fix}")


# ---- loading ------------------------------------------------------------------------------
def unflatten(text: str, tensors: dict[str, Any], source: str) -> Any:
    """The object `flatten` described in `text` (the metadata entry), with `tensors` filled in."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise CheckpointError(f"{source}: the checkpoint structure nests too deeply to rebuild") from None
    except ValueError as exc:
        raise CheckpointError(f"{source}: the {CHECKPOINT_KEY!r} metadata is not valid JSON ({exc}); the file "
                              "was not written by kiln.save or was changed since") from None
    if not isinstance(doc, dict) or "tree" not in doc:
        raise CheckpointError(f"{source}: the {CHECKPOINT_KEY!r} metadata is {_brief(doc)}, expected an object "
                              "with 'version' and 'tree'")
    version = doc.get("version")
    if version != FORMAT_VERSION:
        raise CheckpointError(f"{source}: checkpoint format version {_brief(version)}, but this kiln reads version "
                              f"{FORMAT_VERSION}; upgrade kiln to load it")
    used: dict[str, Any] = {}

    def tensor_named(name: Any) -> Any:
        if not isinstance(name, str) or name not in tensors:
            raise CheckpointError(f"{source}: the checkpoint refers to tensor {_brief(name)}, which the file does "
                                  f"not hold (it holds {len(tensors)} tensors)")
        used[name] = True
        return tensors[name]

    decoders: dict[str, Callable[[Any], Any]] = {
        "tensor": tensor_named,
        "float": lambda v: _special_float(v, source),
        "list": lambda v: [decode(x) for x in _items(v, "list", source)],
        "tuple": lambda v: tuple(decode(x) for x in _items(v, "tuple", source)),
        "dict": lambda v: {_decode_key(k, source): decode(x) for k, x in _pairs(v, source)},
        "ordered_dict": lambda v: OrderedDict((_decode_key(k, source), decode(x)) for k, x in _pairs(v, source)),
        "counter": lambda v: Counter({_decode_key(k, source): decode(x) for k, x in _pairs(v, source)}),
    }

    def decode(node: Any) -> Any:
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, dict) and len(node) == 1:
            (kind, value), = node.items()
            decoder = decoders.get(kind)
            if decoder is not None:
                return decoder(value)
        raise CheckpointError(f"{source}: unknown checkpoint node {_brief(node)}; expected null, a bool, number or "
                              "string, or an object with one key of tensor, float, list, tuple, dict, ordered_dict, counter")

    try:
        return decode(doc["tree"])
    except RecursionError:
        raise CheckpointError(f"{source}: the checkpoint structure nests too deeply to rebuild") from None


def _items(value: Any, kind: str, source: str) -> list:
    if not isinstance(value, list):
        raise CheckpointError(f"{source}: a {kind} node holds {_brief(value)}, expected a JSON array")
    return value


def _pairs(value: Any, source: str) -> list:
    if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
        raise CheckpointError(f"{source}: a dict node holds {_brief(value)}, expected a JSON array of [key, value] pairs")
    return value


def _decode_key(key: Any, source: str) -> Any:
    if isinstance(key, dict):
        return _special_float(key.get("float"), source) if list(key) == ["float"] else _bad_key(key, source)
    if key is None or isinstance(key, (bool, int, float, str)):
        return key
    return _bad_key(key, source)


def _bad_key(key: Any, source: str) -> Any:
    raise CheckpointError(f"{source}: dict key {_brief(key)} in the checkpoint is not a str, int, float, bool or null")


def _special_float(value: Any, source: str) -> float:
    if value not in ("nan", "inf", "-inf"):
        raise CheckpointError(f"{source}: float node {_brief(value)}, expected 'nan', 'inf' or '-inf'")
    return float(value)


def _brief(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
