"""The safetensors file format, read and written with NumPy alone (no pickle, no third-party code).

A file is::

    8 bytes    little-endian uint64 N: the length of the JSON header
    N bytes    JSON: {name: {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
                      "__metadata__": {str: str}}   (padded with spaces to a multiple of 8)
    the rest   the raw little-endian bytes of every tensor, C order, at data_offsets
               (relative to the start of this byte buffer)

This is the format of https://github.com/huggingface/safetensors, so files move
freely between kiln, PyTorch, JAX and NumPy users.

Both ends take a path or a binary file object (``open(..., "wb")``, ``io.BytesIO``, a
socket's file); a stream needs no ``seek``, and reading one stops right after the file's
last tensor, so several files can follow one another in one stream.

>>> write_arrays({"w": np.ones((2, 3), np.float32)}, "model.safetensors", {"format": "kiln"})
>>> arrays, metadata = read_arrays("model.safetensors")
"""
from __future__ import annotations

import errno
import io
import json
import math
import os
import struct
import uuid
from typing import Any, BinaryIO, Mapping

import numpy as np

# safetensors dtype tag <-> little-endian NumPy dtype, for the dtypes kiln has
DTYPE_OF_TAG: dict[str, np.dtype] = {
    "BOOL": np.dtype("bool"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
}
try:  # bfloat16 arrays need ml_dtypes (the optional extra kiln[bfloat16])
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - exercised by tests/io in a subprocess without it
    _ml_dtypes = None
if _ml_dtypes is not None:
    DTYPE_OF_TAG["BF16"] = np.dtype(_ml_dtypes.bfloat16)
TAG_OF_DTYPE: dict[np.dtype, str] = {dt.newbyteorder("="): tag for tag, dt in DTYPE_OF_TAG.items()}

METADATA_KEY = "__metadata__"
MAX_HEADER_BYTES = 100_000_000  # the reference implementation's limit: anything larger is not a header
MAX_DIMS = 64  # NumPy's (and PyTorch's) limit on the number of dimensions
MAX_NBYTES = 2**63 - 1  # no array, not even an empty one, may have dims whose product exceeds this
READ_CHUNK = 64 * 1024 * 1024  # a stream of unknown size is read this much at a time, so memory follows the data
_ALIGNMENT = 8


class SafetensorsError(ValueError):
    """A file that is not a valid safetensors file (bad header, offsets or dtype)."""


# ---- writing --------------------------------------------------------------------------
def write_arrays(arrays: Mapping[str, np.ndarray], path: str | os.PathLike | BinaryIO,
                 metadata: Mapping[str, str] | None = None) -> None:
    """Write NumPy arrays as safetensors, names sorted, to `path` or a binary file object.

    A path is replaced atomically; a file object gets the bytes written at its position
    (it need not be seekable).
    """
    names = sorted(arrays)
    header: dict[str, Any] = {}
    if metadata:
        header[METADATA_KEY] = _check_metadata(metadata)
    blobs: list[bytes] = []
    offset = 0
    for name in names:
        array = np.asarray(arrays[name])
        tag = _tag_of(name, array.dtype)
        data = array.astype(DTYPE_OF_TAG[tag], copy=False).tobytes(order="C")
        header[name] = {"dtype": tag, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % _ALIGNMENT)  # keep the byte buffer 8-byte aligned, as the reference does
    parts = [struct.pack("<Q", len(text)), text, *blobs]
    if is_file_object(path, "write"):
        for part in parts:
            path.write(part)
    else:
        _write_atomically(path, parts)


def is_file_object(target: Any, method: str) -> bool:
    """True for a binary file object with `method` ("read" or "write"); TypeError for a text-mode one."""
    if not hasattr(target, method) or isinstance(target, (str, bytes, os.PathLike)):
        return False
    if isinstance(target, io.TextIOBase) or "b" not in getattr(target, "mode", "b"):
        verb = "reads" if method == "read" else "writes"
        mode = "rb" if method == "read" else "wb"
        raise TypeError(f"kiln {verb} binary data, but got a file opened in text mode "
                        f"({type(target).__name__}, mode={getattr(target, 'mode', '?')!r}); "
                        f"open it with open(path, {mode!r}), or pass the path itself")
    return True


def _tag_of(name: str, dtype: np.dtype) -> str:
    tag = TAG_OF_DTYPE.get(dtype.newbyteorder("="))
    if tag is None:
        supported = ", ".join(str(d) for d in TAG_OF_DTYPE)
        raise TypeError(f"cannot save {name!r}: dtype {dtype} has no safetensors tag kiln writes "
                        f"(supported: {supported}); convert it first, e.g. tensor.float()")
    return tag


def _check_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata must be a dict of str to str, got {type(metadata).__name__}")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"metadata must map str to str (safetensors stores text only), got "
                            f"{key!r}: {value!r}; convert values with str() or json.dumps()")
    return dict(metadata)


def _write_atomically(path: str | os.PathLike, parts: list[bytes]) -> None:
    """Write to a temporary file next to `path`, then rename: readers never see half a file."""
    target = os.fspath(path)
    folder, base = os.path.split(os.path.abspath(target))
    tmp = os.path.join(folder, f".{base}.{uuid.uuid4().hex[:12]}.tmp")  # open() keeps the umask's mode
    try:
        with open(tmp, "xb") as f:
            for part in parts:
                f.write(part)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ---- reading --------------------------------------------------------------------------
def read_arrays(path: str | os.PathLike | BinaryIO) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read every array (writable, native byte order, in file order) and the metadata of a safetensors file.

    `path` may be a binary file object; it is read from its position to the end of the last tensor.
    """
    if is_file_object(path, "read"):
        return _read_stream(path)
    with _open(path) as f:
        header, data_start, data_size = _read_header(f, path)
        metadata = header.pop(METADATA_KEY, None) or {}
        entries = [(name, _parse_entry(name, entry, data_size, path)) for name, entry in header.items()]
        _check_coverage([e for _, e in entries], data_size, path)
        arrays = {}
        for name, (dtype, shape, begin, end) in entries:
            arrays[name] = _read_array(f, data_start + begin, end - begin, dtype, shape, name, path)
    return arrays, metadata


def read_metadata(path: str | os.PathLike | BinaryIO) -> dict[str, str]:
    """The ``__metadata__`` dict of a safetensors file (empty when it has none), without reading the data.

    A file object is left positioned just after the header.
    """
    if is_file_object(path, "read"):
        header, _, _ = _read_header(path, _stream_name(path), None)
        return header.get(METADATA_KEY) or {}
    with _open(path) as f:
        header, _, _ = _read_header(f, path)
    return header.get(METADATA_KEY) or {}


def _open(path: str | os.PathLike) -> BinaryIO:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no such file: expected a .safetensors file written by "
                                "kiln.save or the safetensors library", os.fspath(path)) from None


def _not_safetensors(path: Any, why: str) -> SafetensorsError:
    return SafetensorsError(f"{os.fspath(path)!r} is not a safetensors file ({why}); kiln.load reads files "
                            "written by kiln.save or safetensors' save_file (it never loads pickles written by "
                            "other programs, such as torch.save's .pt files: convert those with "
                            "safetensors.torch.save_file)")


def _read_stream(f: BinaryIO) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """`read_arrays` for a file object: the header, then each tensor's bytes in offset order (no seek)."""
    name = _stream_name(f)
    header, _, _ = _read_header(f, name, None)
    metadata = header.pop(METADATA_KEY, None) or {}
    left = _bytes_left(f)
    entries = [(key, _parse_entry(key, entry, left, name)) for key, entry in header.items()]
    data_size = max((end for _, (_, _, _, end) in entries), default=0)
    _check_coverage([e for _, e in entries], data_size, name)
    arrays = {}
    for key, (dtype, shape, begin, end) in sorted(entries, key=lambda e: (e[1][2], e[1][3])):
        if left == MAX_NBYTES and end - begin > READ_CHUNK:  # a pipe: a size is a claim until the bytes come
            arrays[key] = _read_array_in_chunks(f, end - begin, dtype, shape, key, name)
        else:
            arrays[key] = _read_array(f, None, end - begin, dtype, shape, key, name)
    return {key: arrays[key] for key, _ in entries}, metadata


def _bytes_left(f: BinaryIO) -> int:
    """How many bytes a seekable stream has after its position (a bound on the offsets); else MAX_NBYTES."""
    try:
        if f.seekable():
            here = f.tell()
            end = f.seek(0, os.SEEK_END)
            f.seek(here)
            return end - here
    except (AttributeError, OSError, ValueError):
        pass
    return MAX_NBYTES


def _stream_name(f: Any) -> str:
    name = getattr(f, "name", None)
    return name if isinstance(name, str) else f"<{type(f).__name__}>"


def _read_exact(f: BinaryIO, n: int) -> bytes:
    """Up to n bytes: fewer only at the end of the stream (pipes and sockets return short reads)."""
    chunks = []
    while n > 0:
        chunk = f.read(n)
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_header(f: BinaryIO, path: Any, file_size: int | None = -1) -> tuple[dict[str, Any], int, int]:
    """(header dict, where the byte buffer starts, its size); a stream (file_size None) has no known size."""
    if file_size == -1:
        file_size = os.fstat(f.fileno()).st_size
    prefix = _read_exact(f, 8)
    if len(prefix) < 8:
        size = f"{file_size} bytes" if file_size is not None else f"only {len(prefix)} bytes left"
        raise _not_safetensors(path, f"it has {size}, fewer than the 8-byte header length")
    (length,) = struct.unpack("<Q", prefix)
    if length > MAX_HEADER_BYTES or (file_size is not None and length > file_size - 8):
        size = f"the file has {file_size} bytes" if file_size is not None else f"the limit is {MAX_HEADER_BYTES}"
        raise _not_safetensors(path, f"the header length field says {length} bytes, but {size}")
    raw = _read_exact(f, length)
    if len(raw) < length:
        raise _not_safetensors(path, f"the header is truncated: read {len(raw)} of {length} bytes")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _not_safetensors(path, f"the header is not valid UTF-8 JSON: {exc}") from None
    except RecursionError:
        raise _not_safetensors(path, "the header's JSON nests too deeply to parse; expected an object of "
                                     "flat tensor entries") from None
    if not isinstance(header, dict):
        raise _not_safetensors(path, f"the header is a JSON {type(header).__name__}, expected an object")
    metadata = header.get(METADATA_KEY)
    if metadata is not None and not (isinstance(metadata, dict)
                                     and all(isinstance(v, str) for v in metadata.values())):
        raise _not_safetensors(path, f"{METADATA_KEY} must be an object of strings, got {_short(metadata)}")
    return header, 8 + length, (file_size - 8 - length) if file_size is not None else -1


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _parse_entry(name: str, entry: Any, data_size: int, path: Any) -> tuple[np.dtype, tuple, int, int]:
    """Validate one header entry: (dtype, shape, begin, end)."""
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        raise _not_safetensors(path, f"entry {_short(name)} is {_short(entry)}, expected "
                                     "{'dtype': ..., 'shape': [...], 'data_offsets': [begin, end]}")
    tag, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(tag, str):
        raise _not_safetensors(path, f"tensor {_short(name)} has dtype {_short(tag)}, expected a string "
                                     "such as 'F32'")
    if tag not in DTYPE_OF_TAG:
        raise SafetensorsError(f"{os.fspath(path)!r}: tensor {_short(name)} has dtype {tag[:100]}, which kiln "
                               f"does not support (supported: {', '.join(DTYPE_OF_TAG)}); convert it before saving, "
                               "e.g. torch: tensor.float()")
    _check_shape(name, shape, DTYPE_OF_TAG[tag].itemsize, path)
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)):
        raise _not_safetensors(path, f"tensor {_short(name)} has data_offsets {_short(offsets)}, expected [begin, end] "
                                     "with 0 <= begin <= end")
    dtype = DTYPE_OF_TAG[tag]
    begin, end = offsets
    if begin > end or end > data_size:
        raise _not_safetensors(path, f"tensor {_short(name)} has data_offsets {_short(offsets)}, which do not fit: "
                                     f"expected 0 <= begin <= end <= {data_size} (the size of the byte buffer)")
    nbytes = math.prod(shape) * dtype.itemsize
    if end - begin != nbytes:
        raise _not_safetensors(path, f"tensor {_short(name)} ({tag}, shape {shape}) needs {nbytes} bytes, but "
                                     f"data_offsets {offsets} hold {end - begin}")
    return dtype, tuple(shape), begin, end


def _check_shape(name: str, shape: Any, itemsize: int, path: Any) -> None:
    """A shape is a list of at most MAX_DIMS ints >= 0 whose product (ignoring zeros) an array can hold."""
    if not (isinstance(shape, list) and all(_is_count(d) for d in shape)):
        raise _not_safetensors(path, f"tensor {_short(name)} has shape {_short(shape)}, expected a list of integer "
                                     "sizes >= 0")
    if len(shape) > MAX_DIMS:
        raise _not_safetensors(path, f"tensor {_short(name)} has {len(shape)} dims, expected at most {MAX_DIMS}")
    if any(d > MAX_NBYTES for d in shape) or math.prod(d for d in shape if d) * itemsize > MAX_NBYTES:
        raise _not_safetensors(path, f"tensor {_short(name)} has shape {_short(shape)}, whose sizes multiply past "
                                     f"{MAX_NBYTES} bytes; expected sizes an array can hold")


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _short(value: Any, limit: int = 200) -> str:
    """repr(value), cut to `limit` characters: a hostile header must not flood the message."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # ValueError: an int with more digits than str() allows
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_coverage(entries: list[tuple[np.dtype, tuple, int, int]], data_size: int, path: Any) -> None:
    """Tensors must tile the byte buffer exactly: no overlaps, no gaps, no trailing bytes."""
    position = 0
    for _, _, begin, end in sorted(entries, key=lambda e: (e[2], e[3])):
        if begin != position:
            raise _not_safetensors(path, f"tensor data overlaps or leaves a gap at byte {position}")
        position = end
    if position != data_size:
        raise _not_safetensors(path, f"the tensors cover {position} bytes of a {data_size}-byte buffer")


def _read_into(f: BinaryIO, buffer: np.ndarray) -> int:
    """Fill `buffer` from f (looping over short reads); returns how many bytes came."""
    view = memoryview(buffer)
    got = 0
    reader = getattr(f, "readinto", None)
    while got < len(view):
        if reader is not None:
            n = reader(view[got:])
        else:
            chunk = f.read(len(view) - got)
            n = len(chunk)
            view[got:got + n] = chunk
        if not n:
            break
        got += n
    return got


def _read_array_in_chunks(f: BinaryIO, nbytes: int, dtype: np.dtype, shape: tuple, name: str,
                          path: Any) -> np.ndarray:
    """`_read_array` for a stream of unknown size: memory grows with the bytes that arrive, at most
    READ_CHUNK ahead of them, so a header claiming terabytes fails as truncated, not out of memory."""
    buffer = bytearray()
    while len(buffer) < nbytes:
        chunk = f.read(min(READ_CHUNK, nbytes - len(buffer)))
        if not chunk:
            raise _not_safetensors(path, f"tensor {_short(name)} is truncated: its header entry claims {nbytes} "
                                         f"bytes, but the stream ended after {len(buffer)}; the file is cut short "
                                         "or its header is corrupt")
        buffer += chunk
    return _finish_array(np.frombuffer(buffer, dtype=dtype).reshape(shape), name, path)


def _finish_array(array: np.ndarray, name: str, path: Any) -> np.ndarray:
    """Check a BOOL tensor's bytes and bring the array to native byte order."""
    dtype = array.dtype
    if dtype.kind == "b" and array.size and array.view(np.uint8).max() > 1:
        raise _not_safetensors(path, f"BOOL tensor {_short(name)} holds bytes other than 0 and 1")
    if not dtype.isnative:
        array = array.astype(dtype.newbyteorder("="))
    return array


def _read_array(f: BinaryIO, start: int | None, nbytes: int, dtype: np.dtype, shape: tuple, name: str,
                path: Any) -> np.ndarray:
    """Read straight into a fresh aligned array (no intermediate bytes object); start None reads on."""
    try:
        array = np.empty(shape, dtype=dtype)
    except ValueError as exc:  # limits of the NumPy in use (e.g. 32 dims before NumPy 2)
        raise _not_safetensors(path, f"tensor {_short(name)} has shape {shape}, which NumPy cannot hold: "
                                     f"{exc}") from None
    if nbytes:
        if start is not None:
            f.seek(start)
        got = _read_into(f, array.reshape(-1).view(np.uint8))
        if got != nbytes:
            raise _not_safetensors(path, f"tensor {_short(name)} is truncated: read {got} of {nbytes} bytes")
    return _finish_array(array, name, path)
