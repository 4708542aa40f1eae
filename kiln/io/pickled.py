"""Whole objects in a checkpoint: what a checkpoint tree cannot hold (a module, an optimizer, any
object) is pickled by kiln.save, and loading it needs ``weights_only=False`` or allowed globals.

The file is still a safetensors file. Every tensor and NumPy array inside the object is stored
as one of its tensors (named by the module's state_dict where it has a name there; tied and
overlapping ones once, as in a checkpoint tree), and the pickle refers to them by number, so
their bytes are never pickled. The metadata entry PICKLE_KEY holds the JSON::

    {"version": 1,
     "type": "kiln.nn.container.Sequential",          the saved object's class, for messages
     "tensors": {"version": ..., "tree": ...},        a checkpoint tree of {name: tensor or array}
     "leaves": [{"class": "parameter" | "tensor" | "ndarray", "requires_grad": bool}, ...],
     "pickle": "<base64>"}                            the pickle; persistent id i is leaf i

Unpickling calls the classes and functions the pickle names, so it runs code chosen by whoever
wrote the file. With ``weights_only=True`` a restricted unpickler rebuilds only globals that
kiln.io.safe_globals allows, and refuses the file with PickledCheckpointError before unpickling
anything when the pickle names any other.

>>> arrays, text = dump(model)
>>> model_again = load_object(text, arrays, "model.pt", weights_only=False)
"""
from __future__ import annotations

import base64
import binascii
import copyreg
import io
import json
import pickle
import pickletools
from typing import Any

import numpy as np

from ..device import Device
from ..tensor import Tensor
from .checkpoint import CheckpointError, NotATreeError, flatten, rebuild
from .checkpoint import parse_json as _parse_json
from .safe_globals import allowed_globals
from .safetensors import TAG_OF_DTYPE

__all__ = ["PICKLE_KEY", "MAX_PICKLE_BYTES", "PickledCheckpointError", "dump", "load_object", "check_allowed"]

PICKLE_KEY = "kiln.pickle"  # the safetensors metadata entry of a pickled object
MAX_PICKLE_BYTES = 64 * 2**20  # the pickle lives in the header, which readers cap at 100 MB (tensors do not count)
_VERSION = 1
_CLASSES = ("parameter", "tensor", "ndarray")


class PickledCheckpointError(CheckpointError, pickle.UnpicklingError):
    """``kiln.load`` with ``weights_only=True`` met a pickled object that needs globals it does not allow.

    It is a CheckpointError (a ValueError) and, as PyTorch code expects, a pickle.UnpicklingError.
    """


# ---- saving -------------------------------------------------------------------------------
class _Pickler(pickle.Pickler):
    """Pickles an object with its tensors and arrays left out, as numbered persistent ids."""

    def __init__(self, file: io.BytesIO, protocol: int):
        super().__init__(file, protocol, fix_imports=False)  # Python 3 names ("builtins.set"), even in protocol 2
        self.leaves: list[Any] = []  # tensors and arrays in order of first appearance (kept alive for their ids)
        self._numbers: dict[int, int] = {}
        self.dispatch_table = {**copyreg.dispatch_table, Device: _reduce_device}

    def persistent_id(self, obj: Any) -> int | None:
        if not (isinstance(obj, Tensor) or (type(obj) is np.ndarray and obj.dtype.newbyteorder("=") in TAG_OF_DTYPE)):
            return None  # other arrays (uint8, object, strings) pickle the NumPy way
        number = self._numbers.get(id(obj))
        if number is None:
            number = self._numbers[id(obj)] = len(self.leaves)
            self.leaves.append(obj)
        return number


def _reduce_device(device: Device) -> tuple:
    return Device, (device.type, device.index)


def dump(obj: Any, why: NotATreeError | None = None, protocol: int | None = None) -> tuple[dict[str, np.ndarray], str]:
    """(arrays by name, the PICKLE_KEY metadata text) of `obj` pickled; `why` says why it is pickled.

    TypeError when pickle cannot store the object (a lambda, a local class, a lock); CheckpointError
    when its pickled part (everything but tensors and arrays) passes MAX_PICKLE_BYTES.
    """
    protocol = pickle.DEFAULT_PROTOCOL if protocol is None else protocol
    if not isinstance(protocol, int) or isinstance(protocol, bool) or not 2 <= protocol <= pickle.HIGHEST_PROTOCOL:
        raise ValueError(f"kiln.save: pickle_protocol must be an int from 2 to {pickle.HIGHEST_PROTOCOL}, got "
                         f"{protocol!r}. Fix: leave it out (protocol {pickle.DEFAULT_PROTOCOL}) or pass e.g. 4")
    buffer = io.BytesIO()
    pickler = _Pickler(buffer, protocol)
    try:
        pickler.dump(obj)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        reason = f"{why.where} is {why.what}, so kiln pickles the object" if why else "kiln pickles the object"
        fix = f", or {why.fix}" if why else ""
        raise TypeError(f"kiln.save: {reason}, and pickling failed: {exc}. Fix: leave out what pickle cannot store "
                        f"(lambdas, local functions and classes, open files, locks, compiled modules){fix}") from exc
    data = buffer.getvalue()
    if len(data) > MAX_PICKLE_BYTES:
        raise CheckpointError(f"kiln.save: the pickled part of the {type(obj).__name__} (everything but its tensors "
                              f"and NumPy arrays) is {len(data)} bytes, more than the {MAX_PICKLE_BYTES} kiln keeps in "
                              "a file's header. Fix: hold large data in tensors or NumPy arrays (stored outside the "
                              "pickle, at any size), or save a state_dict")
    named = dict(zip(_leaf_names(obj, pickler.leaves), pickler.leaves))
    arrays, tensors = flatten(named)
    doc = {
        "version": _VERSION,
        "type": f"{type(obj).__module__}.{type(obj).__qualname__}",
        "tensors": tensors,
        "leaves": [{"class": _class_of(leaf), "requires_grad": bool(getattr(leaf, "requires_grad", False))}
                   for leaf in pickler.leaves],
        "pickle": base64.b64encode(data).decode("ascii"),
    }
    return arrays, json.dumps(doc, separators=(",", ":"), allow_nan=False)


def _class_of(leaf: Any) -> str:
    from ..nn.parameter import Parameter  # noqa: PLC0415 - kiln.nn imports kiln.io's neighbours

    return "parameter" if isinstance(leaf, Parameter) else "tensor" if isinstance(leaf, Tensor) else "ndarray"


def _leaf_names(obj: Any, leaves: list[Any]) -> list[str]:
    """A distinct name per leaf: its state_dict name when `obj` is a module, else ``tensor.<i>``."""
    from ..nn.module import Module  # noqa: PLC0415 - kiln.nn imports kiln.io's neighbours

    known: dict[int, str] = {}
    if isinstance(obj, Module):
        for name, t in [*obj.named_parameters(), *obj.named_buffers()]:
            known.setdefault(id(t), name)
    names: list[str] = []
    taken: set[str] = set()
    for i, leaf in enumerate(leaves):
        name = known.get(id(leaf), f"tensor.{i}")
        while name in taken:
            name += "#"
        taken.add(name)
        names.append(name)
    return names


# ---- loading ------------------------------------------------------------------------------
def check_allowed(text: str, source: str) -> None:
    """Raise PickledCheckpointError unless every global the pickled object names is allowed."""
    doc, data = _parse(text, source)
    allowed = allowed_globals()
    refused = [name for name in _globals_named(data, source) if name not in allowed]
    if refused:
        raise _refusal(doc["type"], refused, source)


def load_object(text: str, arrays: dict[str, np.ndarray], source: str, device: Any = None,
                weights_only: bool = True) -> Any:
    """The object `dump` described in `text`, with the file's `arrays`; restricted when `weights_only`."""
    if weights_only:
        check_allowed(text, source)
    doc, data = _parse(text, source)
    leaves = _rebuild_leaves(doc, arrays, source, device)
    kind = _RestrictedUnpickler if weights_only else _Unpickler
    unpickler = kind(io.BytesIO(data), leaves, source, doc["type"])
    try:
        return unpickler.load()
    except (PickledCheckpointError, ImportError, AttributeError):
        raise
    except (pickle.UnpicklingError, EOFError) as exc:
        raise CheckpointError(f"{source}: the pickled {doc['type']} is corrupt ({exc}); the file was not written "
                              "by kiln.save or was changed since") from None


class _Unpickler(pickle.Unpickler):
    """Unpickles with the tensors and arrays from the file; names a missing class with the fix."""

    def __init__(self, file: io.BytesIO, leaves: list[Any], source: str, saved_type: str):
        super().__init__(file)
        self.leaves, self.source, self.saved_type = leaves, source, saved_type

    def persistent_load(self, pid: Any) -> Any:
        if type(pid) is not int or not 0 <= pid < len(self.leaves):
            raise CheckpointError(f"{self.source}: the pickle refers to tensor {pid!r}, but the file holds "
                                  f"{len(self.leaves)}; the file was not written by kiln.save or was changed since")
        return self.leaves[pid]

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError) as exc:
            message = (f"kiln.load: {self.source} holds a pickled {self.saved_type}, which needs {module}.{name}, but "
                       f"this program has no such class or function ({exc}). A pickle stores the name of a class, not "
                       f"its code. Fix: define or import {name} (in module {module}) before kiln.load, as it was when "
                       "the file was saved; or save a state_dict, which needs no classes to load")
            raise type(exc)(message) from None


class _RestrictedUnpickler(_Unpickler):
    """Rebuilds only the allowed globals (kiln.io.safe_globals); any other raises PickledCheckpointError."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.allowed = allowed_globals()

    def find_class(self, module: str, name: str) -> Any:
        qualified = f"{module}.{name}"
        if qualified not in self.allowed:
            raise _refusal(self.saved_type, [qualified], self.source)
        return self.allowed[qualified]  # the allowed object itself: no module named by the file is imported


def _refusal(saved_type: str, refused: list[str], source: str) -> PickledCheckpointError:
    short = ", ".join(name.rsplit(".", 1)[-1] for name in refused)
    return PickledCheckpointError(
        f"kiln.load: {source} holds a pickled {saved_type} (kiln.save pickles what a checkpoint of tensors cannot "
        f"hold, such as a whole module), and unpickling runs code named in the file: it needs "
        f"{', '.join(refused)}, which kiln.load with weights_only=True (the default) does not allow. Fix: if you trust "
        f"the file, kiln.load(f, weights_only=False); or allow exactly these with "
        f"kiln.serialization.add_safe_globals([{short}]) or in a `with kiln.serialization.safe_globals([{short}]):` "
        "block. Safer still: save model.state_dict() and load it into a model built in code")


def _parse(text: str, source: str) -> tuple[dict[str, Any], bytes]:
    """The checked PICKLE_KEY document and its pickle bytes."""
    doc = _parse_json(text, PICKLE_KEY, source)
    fields = {"version", "type", "tensors", "leaves", "pickle"}
    if not isinstance(doc, dict) or set(doc) != fields or not isinstance(doc["type"], str) \
            or not isinstance(doc["leaves"], list) or not isinstance(doc["pickle"], str):
        raise CheckpointError(f"{source}: the {PICKLE_KEY!r} metadata is not an object with the fields "
                              f"{sorted(fields)}; the file was not written by kiln.save or was changed since")
    if doc["version"] != _VERSION or isinstance(doc["version"], bool):
        raise CheckpointError(f"{source}: pickled-object format version {doc['version']!r}, but this kiln reads "
                              f"version {_VERSION}; upgrade kiln to load it")
    try:
        data = base64.b64decode(doc["pickle"], validate=True)
    except (binascii.Error, ValueError):
        raise CheckpointError(f"{source}: the pickle in {PICKLE_KEY!r} is not valid base64; the file was not "
                              "written by kiln.save or was changed since") from None
    return doc, data


def _rebuild_leaves(doc: dict[str, Any], arrays: dict[str, np.ndarray], source: str, device: Any) -> list[Any]:
    """The tensors and arrays the pickle refers to, by number: Parameters and requires_grad as saved."""
    from ..nn.parameter import Parameter  # noqa: PLC0415 - kiln.nn imports kiln.io's neighbours

    named = rebuild(doc["tensors"], arrays, source, device)
    infos = doc["leaves"]
    if not isinstance(named, dict) or len(named) != len(infos) or not all(
            isinstance(i, dict) and set(i) == {"class", "requires_grad"} and i["class"] in _CLASSES
            and isinstance(i["requires_grad"], bool) for i in infos):
        raise CheckpointError(f"{source}: the pickled object's tensor table does not match its {len(infos)} leaf "
                              f"entries (each {{'class': one of {_CLASSES}, 'requires_grad': bool}}); the file was "
                              "not written by kiln.save or was changed since")
    leaves = []
    for value, info in zip(named.values(), infos):
        if (info["class"] == "ndarray") != isinstance(value, np.ndarray):
            raise CheckpointError(f"{source}: a pickled leaf is recorded as a {info['class']} but stored as a "
                                  f"{type(value).__name__}; the file was not written by kiln.save or was changed since")
        if info["class"] == "parameter":
            value = Parameter(value, requires_grad=info["requires_grad"])
        elif info["requires_grad"]:
            value.requires_grad_(True)
        leaves.append(value)
    return leaves


def _globals_named(data: bytes, source: str) -> list[str]:
    """Every global the pickle names, in order, read from its opcodes without running them."""
    names: list[str] = []
    memo: dict[Any, Any] = {}
    pushed: list[Any] = []  # what each op pushed, when it was a string (else None): STACK_GLOBAL's operands
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name in ("FRAME", "PROTO"):
                continue  # no stack effect; a frame may start between STACK_GLOBAL's two strings
            if op.name == "GLOBAL":
                names.append(arg.replace(" ", "."))
            elif op.name in ("EXT1", "EXT2", "EXT4"):  # a global by its copyreg extension code
                names.append(".".join(copyreg._inverted_registry.get(arg, ("<extension>", str(arg)))))
            elif op.name == "STACK_GLOBAL":
                module, name = (pushed[-2:] if len(pushed) >= 2 else [None, None])
                names.append(f"{module}.{name}" if isinstance(module, str) and isinstance(name, str) else "<unknown>")
            if op.name == "MEMOIZE":
                memo[len(memo)] = pushed[-1] if pushed else None
            elif op.name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[arg] = pushed[-1] if pushed else None
            elif op.name in ("GET", "BINGET", "LONG_BINGET"):
                pushed.append(memo.get(arg))
            else:
                pushed.append(arg if op.name.endswith("UNICODE") or op.name in ("STRING", "BINSTRING",
                                                                                  "SHORT_BINSTRING") else None)
    except ValueError as exc:
        raise CheckpointError(f"{source}: the pickle in {PICKLE_KEY!r} is corrupt ({exc}); the file was not "
                              "written by kiln.save or was changed since") from None
    return list(dict.fromkeys(names))
