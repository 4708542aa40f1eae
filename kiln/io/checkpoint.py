"""Checkpoint trees: nested dicts, lists and tuples of tensors and Python scalars, without pickle.

``flatten`` splits a tree into the arrays it holds (named by their path, e.g.
``optimizer.state.0.exp_avg``) and a JSON description of everything else; ``unflatten``
puts it back together. The arrays go into a safetensors file and the JSON into its
metadata, so a checkpoint is still an ordinary safetensors file that any reader opens.

The JSON is ``{"version": 1 or 2, "tree": node}``, a node being one of::

    null, true, false, 3, 2.5, "text"      None, bool, int, float (finite), str
    {"float": "nan" | "inf" | "-inf"}      a float JSON cannot spell
    {"tensor": "name"}                     a kiln tensor stored under that name
    {"view": {"of": "name", "offset": 0, "shape": [...], "stride": [...]}}
                                           a tensor sharing memory with another: a strided view
                                           of the stored tensor "name" (offset and strides count
                                           elements of its flattened data)
    {"ndarray": "name"}, {"ndarray_view": {...}}   a NumPy array, as "tensor" and "view"
    {"list": [node, ...]}                  a list
    {"tuple": [node, ...]}                 a tuple
    {"dict": [[key, value], ...]}          a dict, in order; keys are str, int, float, bool or None
    {"ordered_dict": [...]}, {"counter": [...]}   an OrderedDict or a Counter, as "dict"

A tree with an "ndarray" node has version 2 (an older kiln then asks to be upgraded instead of
misreading it); any other tree has version 1, and version 1 files (whose NumPy arrays were stored
as "tensor" nodes) load as before.

Other dict subclasses are saved as plain dicts. Tensors that share memory (the same tensor
twice, tied weights, or views of one another) are stored once and come back sharing memory.
Containers nest at most MAX_DEPTH deep: `flatten` refuses deeper ones, which `unflatten`
would not rebuild.

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

from ..tensor import Tensor, _to_host, from_numpy

__all__ = ["CHECKPOINT_KEY", "FORMAT_VERSION", "MAX_DEPTH", "CheckpointError", "NotATreeError", "flatten",
           "unflatten", "rebuild", "is_flat_state_dict", "shares_memory"]

CHECKPOINT_KEY = "kiln.checkpoint"  # the safetensors metadata entry that holds the tree
FORMAT_VERSION = 2  # the newest version written (only by trees holding NumPy arrays); 1 is read as well
_READ_VERSIONS = (1, 2)
MAX_DEPTH = 100  # containers inside containers: deeper structures are refused when saved and when loaded
_KEY_TYPES = (str, int, float, bool, type(None))
_SUPPORTED = "kiln tensors, NumPy arrays, dicts, lists, tuples, str, int, float, bool and None"


class CheckpointError(ValueError):
    """A checkpoint structure kiln cannot store (nested too deeply), or one stored in a file that
    kiln did not write (or cannot read)."""


class NotATreeError(TypeError):
    """An object the checkpoint tree cannot hold (a module, a set, a tuple key, a cycle): kiln.save
    pickles such objects instead. `where` is its path, `what` says what it is, `fix` how to avoid it."""

    def __init__(self, where: str, what: str, fix: str):
        super().__init__(f"kiln.save: {where} is {what}. Fix: {fix}")
        self.where, self.what, self.fix = where, what, fix


def is_flat_state_dict(obj: Any) -> bool:
    """A dict of str names to kiln tensors: saved as a plain safetensors file, as before checkpoints.

    (NumPy arrays need the tree, which records that they load back as arrays.)
    """
    return (isinstance(obj, dict) and all(isinstance(k, str) for k in obj)
            and all(isinstance(v, Tensor) for v in obj.values()) and "__metadata__" not in obj)


# ---- saving -------------------------------------------------------------------------------
def flatten(obj: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays by name, the JSON-ready tree) of a checkpoint object.

    Leaves that share memory are stored once (see `_store_shared`). An object the tree cannot
    hold raises NotATreeError naming its path; a structure nested more than MAX_DEPTH containers
    deep raises CheckpointError.
    """
    leaves: list[tuple[str, Any, dict[str, Any]]] = []  # (name from the path, data, its node, filled in later)
    array_nodes: list[dict[str, Any]] = []  # nodes of NumPy arrays, which load back as arrays

    def encode(value: Any, path: list[Any], parents: tuple[int, ...]) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return int(value)  # an int subclass (IntEnum) is saved as its value
        if isinstance(value, float):
            return float(value) if math.isfinite(value) else {"float": repr(float(value))}
        if isinstance(value, (Tensor, np.ndarray)):
            node: dict[str, Any] = {}
            leaves.append((".".join(map(str, path)) or "tensor", value._data if isinstance(value, Tensor) else value,
                           node))
            if not isinstance(value, Tensor):
                array_nodes.append(node)
            return node
        if isinstance(value, np.generic):
            return encode(value.item(), path, parents)  # NumPy scalars become Python numbers
        if isinstance(value, (dict, list, tuple)):
            if id(value) in parents:
                raise NotATreeError(_where(path), "a container that contains itself (a checkpoint tree cannot)",
                                    "break the cycle, e.g. store indices instead of references")
            if len(parents) >= MAX_DEPTH:
                raise CheckpointError(f"kiln.save: {_cut(_where(path))} nests too deeply: more than {MAX_DEPTH} dicts, "
                                      f"lists and tuples inside one another, the most kiln.load rebuilds. Fix: "
                                      "flatten the structure, e.g. keep a chain of nodes as one list")
            inner = parents + (id(value),)
            if isinstance(value, dict):
                kind = "counter" if isinstance(value, Counter) else "ordered_dict" if isinstance(value, OrderedDict) \
                    else "dict"
                return {kind: [[_encode_key(k, path), encode(v, path + [k], inner)] for k, v in value.items()]}
            items = [encode(v, path + [i], inner) for i, v in enumerate(value)]
            return {"tuple" if isinstance(value, tuple) else "list": items}
        raise NotATreeError(_where(path), *_unsupported(value))

    tree = encode(obj, [], ())
    arrays = _store_shared(leaves)
    for node in array_nodes:
        (kind, value), = node.items()
        node.clear()
        node["ndarray" if kind == "tensor" else "ndarray_view"] = value
    return arrays, {"version": FORMAT_VERSION if array_nodes else 1, "tree": tree}


def shares_memory(values: list[Any]) -> bool:
    """Whether two of these tensors or arrays share memory (the same one twice, or overlapping views)."""
    data = [v._data if isinstance(v, Tensor) else v for v in values]
    return any(len(group) > 1 for group in _memory_groups(data))


def _memory_groups(data: list[Any]) -> list[list[int]]:
    """Indices into `data` grouped by shared memory: the same array object, or NumPy arrays whose bytes
    overlap. Groups are in order of their first member; members in order."""
    first_of: dict[int, int] = {}  # id of an array object -> index of its first occurrence
    spans = []
    for i, array in enumerate(data):
        if id(array) in first_of:
            continue
        first_of[id(array)] = i
        if isinstance(array, np.ndarray) and array.size:
            spans.append((*_byte_span(array), i))
    parent = {i: i for i in first_of.values()}
    reach, owner = -1, -1
    for lo, hi, i in sorted(spans):
        if lo < reach:
            parent[i] = owner
        else:
            owner = i
        reach = max(reach, hi)
    groups: dict[int, list[int]] = {}
    for i, array in enumerate(data):
        groups.setdefault(parent[first_of[id(array)]], []).append(i)
    return sorted(groups.values())


def _byte_span(array: np.ndarray) -> tuple[int, int]:
    """[first byte, one past the last byte) of the memory an array addresses."""
    start = array.__array_interface__["data"][0]
    low = sum((n - 1) * s for n, s in zip(array.shape, array.strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(array.shape, array.strides) if s > 0)
    return start + low, start + high + array.itemsize


def _store_shared(leaves: list[tuple[str, Any, dict[str, Any]]]) -> dict[str, np.ndarray]:
    """Name each leaf's storage and fill in its node: leaves that share memory are stored once.

    The same array twice becomes one stored tensor. Arrays whose bytes overlap (views of one
    another) are stored as the memory they span, once, and each becomes a view node of it: the
    covering array itself where one covers the span contiguously, else a 1-d span array.
    """
    arrays: dict[str, np.ndarray] = {}
    for group in _memory_groups([data for _, data, _ in leaves]):
        members = [leaves[i] for i in group]
        distinct = {id(data): data for _, data, _ in members}
        if len(distinct) > 1:
            members = _store_views(members, arrays)
        names: dict[int, str] = {}  # id of an array -> the name it is stored under
        for path_name, data, node in members:
            if id(data) not in names:
                names[id(data)] = _unique_name(path_name, arrays)
                arrays[names[id(data)]] = _to_host(data)
            node["tensor"] = names[id(data)]
    return arrays


def _store_views(members: list[tuple[str, Any, dict[str, Any]]],
                 arrays: dict[str, np.ndarray]) -> list[tuple[str, Any, dict[str, Any]]]:
    """Store overlapping NumPy arrays once, as views of one stored array; returns the members left over
    (a dtype or alignment a view cannot express), which are stored by value."""
    first = members[0][1]
    itemsize = first.itemsize

    def viewable(data: Any) -> bool:
        return (data.dtype == first.dtype and all(s % itemsize == 0 for s in data.strides)
                and (data.__array_interface__["data"][0] - first.__array_interface__["data"][0]) % itemsize == 0)

    views = [m for m in members if viewable(m[1])]
    rest = [m for m in members if not viewable(m[1])]
    lo = min(_byte_span(data)[0] for _, data, _ in views)
    hi = max(_byte_span(data)[1] for _, data, _ in views)
    cover = next((data for _, data, _ in views if data.flags.c_contiguous and _byte_span(data) == (lo, hi)), None)
    name = _unique_name(views[0][0], arrays)
    arrays[name] = cover if cover is not None else np.asarray(_Memory(first, lo, hi - lo)).view(first.dtype)
    for _, data, node in views:
        if data is cover:
            node["tensor"] = name
        else:
            offset = (data.__array_interface__["data"][0] - lo) // itemsize
            node["view"] = {"of": name, "offset": offset, "shape": list(data.shape),
                            "stride": [s // itemsize for s in data.strides]}
    return rest


class _Memory:
    """`size` bytes from address `start`, inside the memory `owner` lives in (kept alive), for np.asarray."""

    def __init__(self, owner: np.ndarray, start: int, size: int):
        self.owner = owner
        self.__array_interface__ = {"data": (start, True), "shape": (size,), "typestr": "|u1", "version": 3}


def _encode_key(key: Any, path: list[Any]) -> Any:
    if isinstance(key, np.generic):
        key = key.item()
    if not isinstance(key, _KEY_TYPES):
        raise NotATreeError(f"a key of {_where(path)}", f"{_cut(repr(key))} ({type(key).__name__}); checkpoint dict "
                            "keys are str, int, float, bool or None", "convert the key, e.g. str(key)")
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


def _unsupported(value: Any) -> tuple[str, str]:
    """(what a leaf the tree cannot hold is, the fix should pickling it fail too)."""
    from ..nn.module import Module  # noqa: PLC0415 - kiln.nn imports kiln.io's neighbours

    from ..jit.jit_module import JITModule  # noqa: PLC0415 - kiln.jit imports kiln.io's neighbours

    what = type(value).__name__
    if isinstance(value, JITModule):
        return (f"a module ({what})", "save the module it compiles, kiln.save(compiled.module, path), or better "
                                      "its state_dict: kiln.save(model.state_dict(), path)")
    if isinstance(value, Module) or callable(getattr(value, "state_dict", None)):
        if isinstance(value, Module) or hasattr(value, "parameters"):
            kind, name = "a module", "model"
        else:
            kind, name = "an object", "optimizer" if hasattr(value, "param_groups") else "obj"
        return (f"{kind} ({what})", f"save its state_dict, e.g. kiln.save({name}.state_dict(), path), and restore "
                                    f"it with {name}.load_state_dict(kiln.load(path)) into a freshly built {what}")
    if hasattr(value, "__dlpack__") or hasattr(value, "__array__"):
        fix = "convert it with kiln.from_dlpack(x) or numpy.asarray(x)"
    else:
        fix = "convert it to one of those (a config object: its fields as a dict)"
    return f"a {what}; a checkpoint tree holds {_SUPPORTED}", fix


# ---- loading ------------------------------------------------------------------------------
def unflatten(text: str, arrays: dict[str, np.ndarray], source: str, device: Any = None) -> Any:
    """The object `flatten` described in `text` (the metadata entry), with the file's `arrays` filled in.

    Tensors are made from the arrays (moved to `device` when given); "ndarray" nodes give the
    arrays themselves. Raises CheckpointError for a structure kiln.save would not have written:
    unknown nodes, missing tensors, a key twice in one JSON object or dict node, views outside
    their tensor, or containers nested more than MAX_DEPTH deep.
    """
    return rebuild(parse_json(text, CHECKPOINT_KEY, source), arrays, source, device)


def parse_json(text: str, key: str, source: str) -> Any:
    """The JSON of metadata entry `key`; CheckpointError for invalid, over-deep or duplicate-key JSON."""
    try:
        return json.loads(text, object_pairs_hook=lambda pairs: _unique_keys(pairs, source))
    except RecursionError:
        raise CheckpointError(_too_deep(source)) from None
    except CheckpointError:
        raise
    except ValueError as exc:
        raise CheckpointError(f"{source}: the {key!r} metadata is not valid JSON ({exc}); the file "
                              "was not written by kiln.save or was changed since") from None


def rebuild(doc: Any, arrays: dict[str, np.ndarray], source: str, device: Any = None) -> Any:
    """The object a parsed ``{"version": ..., "tree": ...}`` document describes (see `unflatten`)."""
    if not isinstance(doc, dict) or "tree" not in doc:
        raise CheckpointError(f"{source}: the {CHECKPOINT_KEY!r} metadata is {_brief(doc)}, expected an object "
                              "with 'version' and 'tree'")
    version = doc.get("version")
    if version not in _READ_VERSIONS or isinstance(version, bool):
        raise CheckpointError(f"{source}: checkpoint format version {_brief(version)}, but this kiln reads versions "
                              f"{', '.join(map(str, _READ_VERSIONS))}; upgrade kiln to load it")
    tensors: dict[str, Tensor] = {}

    def array_named(name: Any) -> np.ndarray:
        if not isinstance(name, str) or name not in arrays:
            raise CheckpointError(f"{source}: the checkpoint refers to tensor {_brief(name)}, which the file does "
                                  f"not hold (it holds {len(arrays)} tensors)")
        return arrays[name]

    def tensor_named(name: Any) -> Tensor:
        if name not in tensors:
            t = from_numpy(array_named(name))
            tensors[name] = t if device is None else t.to(device)
        return tensors[name]

    def tensor_view(spec: Any) -> Tensor:
        base = tensor_named(_view_spec(spec, source)["of"])
        view = Tensor._wrap(_strided(base._data, base._device.xp, spec, source), base._device)
        view._base = base  # one version counter, as for any view
        return view

    def mapping(value: Any, depth: int) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for k, x in _pairs(value, source):
            key = _decode_key(k, source)
            if key in out:
                raise CheckpointError(f"{source}: a dict node holds the key {_brief(key)} twice; kiln.save writes "
                                      "each key once, so the file was not written by kiln.save or was changed since")
            out[key] = decode(x, depth)
        return out

    containers: dict[str, Callable[[Any, int], Any]] = {
        "list": lambda v, depth: [decode(x, depth) for x in _items(v, "list", source)],
        "tuple": lambda v, depth: tuple(decode(x, depth) for x in _items(v, "tuple", source)),
        "dict": mapping,
        "ordered_dict": lambda v, depth: OrderedDict(mapping(v, depth)),
        "counter": lambda v, depth: Counter(mapping(v, depth)),
    }
    leaves: dict[str, Callable[[Any], Any]] = {
        "tensor": tensor_named,
        "view": tensor_view,
        "float": lambda v: _special_float(v, source),
    }
    if version >= 2:
        leaves["ndarray"] = array_named
        leaves["ndarray_view"] = lambda v: _strided(array_named(_view_spec(v, source)["of"]), np, v, source)

    def decode(node: Any, depth: int) -> Any:
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, dict) and len(node) == 1:
            (kind, value), = node.items()
            if kind in containers:
                if depth >= MAX_DEPTH:
                    raise CheckpointError(_too_deep(source))
                return containers[kind](value, depth + 1)
            if kind in leaves:
                return leaves[kind](value)
        raise CheckpointError(f"{source}: unknown checkpoint node {_brief(node)}; expected null, a bool, number or "
                              f"string, or an object with one key of {', '.join([*leaves, *containers])} (format "
                              f"version {version})")

    try:
        return decode(doc["tree"], 0)
    except RecursionError:
        raise CheckpointError(_too_deep(source)) from None


def _too_deep(source: str) -> str:
    return (f"{source}: the checkpoint structure nests too deeply: more than {MAX_DEPTH} dicts, lists and "
            "tuples inside one another, the most kiln.load rebuilds (kiln.save refuses deeper ones), so the "
            "file was not written by kiln.save or was changed since")


def _unique_keys(pairs: list[tuple[str, Any]], source: str) -> dict[str, Any]:
    """A JSON object's pairs as a dict; a key given twice raises CheckpointError."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise CheckpointError(f"{source}: the checkpoint structure has a JSON object with the key {_brief(key)} "
                                  "twice; kiln.save writes each key once, so the file was not written by kiln.save "
                                  "or was changed since")
        out[key] = value
    return out


def _view_spec(spec: Any, source: str) -> dict[str, Any]:
    """A view node's fields, checked for shape: CheckpointError for anything else."""
    fields = ("of", "offset", "shape", "stride")
    if not (isinstance(spec, dict) and sorted(spec) == sorted(fields) and _count(spec["offset"])
            and isinstance(spec["shape"], list) and isinstance(spec["stride"], list)
            and len(spec["shape"]) == len(spec["stride"]) <= 64 and all(_count(n) for n in spec["shape"])
            and all(isinstance(st, int) and not isinstance(st, bool) for st in spec["stride"])):
        raise CheckpointError(f"{source}: view node {_brief(spec)}, expected {{'of': name, 'offset': int >= 0, "
                              "'shape': [int >= 0, ...], 'stride': [int, ...]}} with as many strides as sizes")
    return spec


def _strided(base: Any, xp: Any, spec: dict[str, Any], source: str) -> Any:
    """The strided view of array `base` that a (checked) view node describes, bounds-checked."""
    offset, shape, stride = spec["offset"], spec["shape"], spec["stride"]
    size = int(base.size)
    if 0 in shape:
        low, high = offset, offset - 1
    else:
        low = offset + sum((n - 1) * st for n, st in zip(shape, stride) if st < 0)
        high = offset + sum((n - 1) * st for n, st in zip(shape, stride) if st > 0)
    if low < 0 or high >= size or offset > size:
        raise CheckpointError(f"{source}: view node {_brief(spec)} reaches elements {low}..{high} of tensor "
                              f"{_brief(spec['of'])}, which has {size}; the file was not written by kiln.save or "
                              "was changed since")
    flat = base.reshape(-1)
    steps = tuple(st * flat.itemsize if n > 1 else 0 for n, st in zip(shape, stride))  # a size-1 dim never steps
    return xp.lib.stride_tricks.as_strided(flat[offset:], tuple(shape), steps)


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


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
    return _cut(repr(value), limit)


def _cut(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
