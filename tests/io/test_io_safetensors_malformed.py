"""Malformed safetensors files raise SafetensorsError saying what was expected and what came, never a crash.

Each case is a hand-built file: an 8-byte header length, a JSON header (or raw bytes),
then the byte buffer. Hostile headers (deep nesting, overflowing shapes, huge numbers)
must fail cleanly, with a short message, before any large allocation.
"""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import kiln
from kiln.io import SafetensorsError, read_arrays
from kiln.io.safetensors import read_metadata


def _entry(dtype="F32", shape=(2,), offsets=(0, 8)) -> dict:
    return {"dtype": dtype, "shape": list(shape) if isinstance(shape, tuple) else shape,
            "data_offsets": list(offsets) if isinstance(offsets, tuple) else offsets}


def _w(**kwargs) -> dict:
    return {"w": _entry(**kwargs)}


DEEP = 100_000
BIG_INT = "9" * 5000

# id -> (header: dict/list/... or raw bytes, data bytes, header length override, expected message fragment)
CASES = {
    "deep_list": (b"[" * DEEP + b"]" * DEEP, b"", None, "nests too deeply"),
    "deep_object": (b'{"a":' * DEEP + b"1" + b"}" * DEEP, b"", None, "nests too deeply"),
    "deep_shape": (b'{"w": {"dtype": "F32", "shape": ' + b"[" * DEEP + b"]" * DEEP + b', "data_offsets": [0, 0]}}',
                   b"", None, "nests too deeply"),
    "dtype_list": (_w(dtype=["F32"]), bytes(8), None, "expected a string such as 'F32'"),
    "dtype_dict": (_w(dtype={"F32": 1}), bytes(8), None, "expected a string such as 'F32'"),
    "dtype_int": (_w(dtype=5), bytes(8), None, "expected a string such as 'F32'"),
    "dtype_null": (_w(dtype=None), bytes(8), None, "expected a string such as 'F32'"),
    "dtype_unknown": (_w(dtype="U16"), bytes(8), None, "which kiln does not support"),
    "shape_product_wraps_int64": (_w(shape=[2**32, 2**32], offsets=(0, 0)), b"", None, "multiply past"),
    "shape_product_overflows": (_w(shape=[2**40] * 3, offsets=(0, 0)), b"", None, "multiply past"),
    "zero_times_huge": (_w(shape=[0, 2**62], offsets=(0, 0)), b"", None, "multiply past"),
    "huge_dim": (_w(shape=[10**30], offsets=(0, 0)), b"", None, "multiply past"),
    "too_many_dims": (_w(shape=[1] * 65, offsets=(0, 4)), bytes(4), None, "65 dims, expected at most 64"),
    "negative_dim": (_w(shape=[-1, 2]), bytes(8), None, "expected a list of integer sizes >= 0"),
    "float_dim": (_w(shape=[2.0]), bytes(8), None, "expected a list of integer sizes >= 0"),
    "bool_dim": (_w(shape=[True, 2]), bytes(8), None, "expected a list of integer sizes >= 0"),
    "string_dim": (_w(shape=["2"]), bytes(8), None, "expected a list of integer sizes >= 0"),
    "null_dim": (_w(shape=[None]), bytes(8), None, "expected a list of integer sizes >= 0"),
    "nan_dim": (b'{"w": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 8]}}', bytes(8), None,
                "expected a list of integer sizes >= 0"),
    "shape_int": (_w(shape=2), bytes(8), None, "expected a list of integer sizes >= 0"),
    "shape_dict": (_w(shape={"0": 2}), bytes(8), None, "expected a list of integer sizes >= 0"),
    "offsets_out_of_range": (_w(offsets=(0, 16), shape=[4]), bytes(8), None, "<= 8 (the size of the byte buffer)"),
    "offsets_far_out_of_range": (_w(offsets=(2**62, 2**62 + 8)), bytes(8), None, "<= 8 (the size"),
    "offsets_reversed": (_w(offsets=(8, 0)), bytes(8), None, "expected 0 <= begin <= end"),
    "offsets_negative": (_w(offsets=(-8, 0)), bytes(8), None, "expected [begin, end]"),
    "offsets_float": (_w(offsets=[0.0, 8.0]), bytes(8), None, "expected [begin, end]"),
    "offsets_three": (_w(offsets=[0, 4, 8]), bytes(8), None, "expected [begin, end]"),
    "offsets_string": (_w(offsets="0-8"), bytes(8), None, "expected [begin, end]"),
    "size_mismatch": (_w(shape=[3]), bytes(8), None, "needs 12 bytes, but data_offsets [0, 8] hold 8"),
    "overlapping": ({"a": _entry(offsets=(0, 8)), "b": _entry(offsets=(4, 12))}, bytes(12), None, "overlaps"),
    "gap": ({"a": _entry(shape=(1,), offsets=(0, 4)), "b": _entry(shape=(1,), offsets=(8, 12))}, bytes(12), None,
            "leaves a gap"),
    "trailing_bytes": (_w(), bytes(16), None, "cover 8 bytes of a 16-byte buffer"),
    "header_length_past_end": (_w(), bytes(8), 10_000, "the header length field says 10000 bytes"),
    "header_length_huge": (_w(), bytes(8), 2**64 - 1, f"says {2**64 - 1} bytes"),
    "header_list": ([], b"", None, "the header is a JSON list, expected an object"),
    "header_string": ("w", b"", None, "the header is a JSON str, expected an object"),
    "header_number": (3, b"", None, "the header is a JSON int, expected an object"),
    "header_null": (None, b"", None, "the header is a JSON NoneType, expected an object"),
    "not_json": (b"{nope", b"", None, "not valid UTF-8 JSON"),
    "not_utf8": (b'\xff\xfe{"w": 1}', b"", None, "not valid UTF-8 JSON"),
    "empty_header": (b"", b"", None, "not valid UTF-8 JSON"),
    "huge_int_literal": (b'{"w": {"dtype": "F32", "shape": [' + BIG_INT.encode() + b'], "data_offsets": [0, 8]}}',
                         bytes(8), None, "not valid UTF-8 JSON"),
    "duplicate_keys": (b'{"w": {}, "w": {}}', b"", None, "duplicate key 'w'"),
    "entry_list": ({"w": [1, 2]}, b"", None, "expected {'dtype': ..., 'shape': [...], 'data_offsets'"),
    "entry_missing_keys": ({"w": {"dtype": "F32"}}, b"", None, "expected {'dtype'"),
    "metadata_list": ({"__metadata__": ["a"]}, b"", None, "__metadata__ must be an object of strings"),
    "metadata_non_string": ({"__metadata__": {"a": 1}}, b"", None, "__metadata__ must be an object of strings"),
    "bool_bytes": (_w(dtype="BOOL", shape=[2], offsets=(0, 2)), b"\x00\x02", None, "other than 0 and 1"),
    "long_shape": (_w(shape=["x"] * 10_000), bytes(8), None, "expected a list of integer sizes >= 0"),
}
HEADER_LEVEL = {"deep_list", "deep_object", "deep_shape", "header_length_past_end", "header_length_huge", "header_list",
                "header_string", "header_number", "header_null", "not_json", "not_utf8", "empty_header",
                "huge_int_literal", "duplicate_keys", "metadata_list", "metadata_non_string"}


def _write(path, header, data: bytes, length: int | None) -> None:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)


def _make(tmp_path, name: str):
    """(path, expected message fragment) of case `name`, written under tmp_path."""
    header, data, length, expected = CASES[name]
    path = tmp_path / f"{name}.safetensors"
    _write(path, header, data, length)
    return path, expected


def _check(info: pytest.ExceptionInfo, path, expected: str) -> None:
    message = str(info.value)
    assert expected in message, message
    assert str(path) in message and len(message) < 1500, message


@pytest.mark.parametrize("reader", [read_arrays, kiln.load], ids=["read_arrays", "kiln.load"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_files_raise_safetensors_error(tmp_path, name, reader):
    path, expected = _make(tmp_path, name)
    with pytest.raises(SafetensorsError) as info:
        reader(path)
    _check(info, path, expected)


@pytest.mark.parametrize("name", sorted(HEADER_LEVEL))
def test_malformed_headers_fail_read_metadata_too(tmp_path, name):
    path, expected = _make(tmp_path, name)
    with pytest.raises(SafetensorsError) as info:
        read_metadata(path)
    _check(info, path, expected)


@pytest.mark.parametrize("size", [0, 3, 7])
def test_files_shorter_than_the_length_field(tmp_path, size):
    path = tmp_path / "short.safetensors"
    path.write_bytes(b"\x01" * size)
    with pytest.raises(SafetensorsError, match=f"it has {size} bytes, fewer than the 8-byte header length"):
        kiln.load(path)


def test_the_cases_are_malformed_only_where_they_say(tmp_path):
    """The helper builds valid files when nothing is wrong (so each case tests only its own defect)."""
    path = tmp_path / "ok.safetensors"
    _write(path, {"__metadata__": {"a": "b"}, **_w()}, np.arange(2, dtype="<f4").tobytes(), None)
    arrays, metadata = read_arrays(path)
    assert metadata == {"a": "b"} and arrays["w"].tolist() == [0.0, 1.0]
    _write(path, _w(shape=[0, 2**40], offsets=(0, 0)), b"", None)  # empty, with a large but possible dim
    assert read_arrays(path)[0]["w"].shape == (0, 2**40)
    _write(path, _w(shape=[1] * 64, offsets=(0, 4)), bytes(4), None)  # exactly the dims limit
    assert read_arrays(path)[0]["w"].ndim == 64
