"""Checkpoint structure: shared memory is stored once and comes back shared; corrupt or too-deep
structures are refused with kiln's errors; a stream cannot make kiln.load allocate what it lacks."""
from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest

import kiln
from kiln.io import CheckpointError, SafetensorsError
from kiln.io import safetensors as st
from kiln.io.checkpoint import CHECKPOINT_KEY, MAX_DEPTH


def _round_trip(obj, metadata=None):
    buffer = io.BytesIO()
    kiln.save(obj, buffer, metadata=metadata)
    raw = buffer.getvalue()
    buffer.seek(0)
    return kiln.load(buffer), raw


def _header(raw: bytes) -> dict:
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n])


def _stored(raw: bytes) -> dict:
    """name -> shape of the tensors the file holds."""
    return {k: v["shape"] for k, v in _header(raw).items() if k != "__metadata__"}


class _Pipe:
    """A stream with read() only (no seek, no size), as a socket or a pipe."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        n = len(self.data) - self.pos if n < 0 else n
        chunk = self.data[self.pos:self.pos + n]
        self.pos += len(chunk)
        return chunk


# ---- tied tensors and views -----------------------------------------------------------------
def test_the_same_tensor_twice_in_a_flat_dict_is_stored_once_and_loads_shared():
    w = kiln.arange(6.0).reshape(2, 3)
    loaded, raw = _round_trip({"embed.weight": w, "head.weight": w})
    assert _stored(raw) == {"embed.weight": [2, 3]}  # one copy of the bytes, as the docs promise
    assert list(loaded) == ["embed.weight", "head.weight"]
    loaded["embed.weight"].add_(10.0)
    assert loaded["head.weight"].tolist() == [[10.0, 11.0, 12.0], [13.0, 14.0, 15.0]]


def test_tied_module_weights_round_trip_through_load_state_dict():
    model = kiln.nn.Sequential(kiln.nn.Embedding(5, 4), kiln.nn.Linear(4, 5, bias=False))
    model[1].weight = model[0].weight
    state = model.state_dict()
    loaded, raw = _round_trip(state)
    assert len(_stored(raw)) == 1 and sorted(loaded) == sorted(state)
    fresh = kiln.nn.Sequential(kiln.nn.Embedding(5, 4), kiln.nn.Linear(4, 5, bias=False))
    fresh.load_state_dict(loaded)
    np.testing.assert_array_equal(fresh[1].weight.detach().numpy(), model[0].weight.detach().numpy())


def test_views_sharing_memory_are_stored_once_and_load_as_views():
    w = kiln.arange(12.0).reshape(3, 4)
    loaded, raw = _round_trip({"w": w, "wT": w.T, "row": w[1], "col": w[:, 2], "rev": w[::-1]})
    assert _stored(raw) == {"w": [3, 4]}
    assert loaded["wT"].tolist() == w.T.tolist() and loaded["rev"].tolist() == w[::-1].tolist()
    assert loaded["row"].tolist() == [4.0, 5.0, 6.0, 7.0] and loaded["col"].tolist() == [2.0, 6.0, 10.0]
    loaded["wT"].mul_(0.0)  # writing one is seen in all of them, as after torch.load
    assert loaded["w"].abs().sum().item() == 0.0 and loaded["row"].abs().sum().item() == 0.0
    loaded["col"].add_(1.0)
    assert loaded["w"][:, 2].tolist() == [1.0, 1.0, 1.0] and loaded["rev"][0].tolist() == [0.0, 0.0, 1.0, 0.0]


def test_views_without_their_base_are_stored_as_the_memory_they_span():
    w = kiln.arange(12.0).reshape(3, 4)
    loaded, raw = _round_trip({"q": w[:, :2], "k": w[:, 2:]})  # interleaved: their spans overlap
    assert len(_stored(raw)) == 1
    assert loaded["q"].tolist() == w[:, :2].tolist() and loaded["k"].tolist() == w[:, 2:].tolist()
    loaded["q"].add_(1.0)
    assert loaded["k"].tolist() == w[:, 2:].tolist()  # no element in common: untouched


def test_a_size_one_dimension_may_stride_past_the_stored_span():
    w = kiln.arange(12.0).reshape(3, 4)
    loaded, raw = _round_trip({"a": w[0:1, 1:3], "b": w[0, 2:4]})  # a's row stride (4) exceeds the 3-element span
    assert len(_stored(raw)) == 1
    assert loaded["a"].tolist() == [[1.0, 2.0]] and loaded["b"].tolist() == [2.0, 3.0]
    loaded["a"].add_(1.0)
    assert loaded["b"].tolist() == [3.0, 3.0]
    view = {"of": "w", "offset": 1, "shape": [1, 2], "stride": [10**40, 1]}  # a size-1 dim's stride is unused
    assert kiln.load(_with_structure(json.dumps({"version": 1, "tree": {"view": view}}))).tolist() == [[1.0, 2.0]]


def test_views_in_a_nested_checkpoint_and_numpy_arrays():
    base = np.arange(8, dtype=np.int64)
    loaded, raw = _round_trip({"opt": {"buf": [base, base[2:6]]}, "step": 3})
    assert _stored(raw) == {"opt.buf.0": [8]}
    first, second = loaded["opt"]["buf"]  # NumPy arrays come back as NumPy arrays, still sharing memory
    assert type(first) is np.ndarray and type(second) is np.ndarray
    second.fill(-1)
    assert first.tolist() == [0, 1, -1, -1, -1, -1, 6, 7]


def test_separate_rows_of_one_tensor_stay_separate_tensors():
    w = kiln.arange(6.0).reshape(3, 2)
    loaded, raw = _round_trip({"a": w[0], "b": w[2]})
    assert _stored(raw) == {"a": [2], "b": [2]}  # no byte in common: a plain safetensors file
    assert CHECKPOINT_KEY not in _header(raw).get("__metadata__", {})
    assert loaded["a"].tolist() == [0.0, 1.0] and loaded["b"].tolist() == [4.0, 5.0]


def test_an_unshared_state_dict_is_still_a_plain_safetensors_file():
    _, raw = _round_trip({"a": kiln.ones(2), "b": kiln.zeros(3)})
    assert _stored(raw) == {"a": [2], "b": [3]} and "__metadata__" not in _header(raw)


def test_a_view_of_another_dtype_is_stored_by_value():
    base = np.arange(4, dtype=np.int32)
    loaded, _ = _round_trip({"i": base, "f": base.view(np.float32)})
    assert loaded["i"].tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(loaded["f"], base.view(np.float32))


def test_torch_load_shares_views_as_kiln_load_does():
    torch = pytest.importorskip("torch")
    w = torch.arange(6.0).reshape(2, 3)
    buffer = io.BytesIO()
    torch.save({"w": w, "wT": w.T}, buffer)
    buffer.seek(0)
    theirs = torch.load(buffer)
    theirs["w"].add_(1.0)
    mine = kiln.arange(6.0).reshape(2, 3)
    ours, _ = _round_trip({"w": mine, "wT": mine.T})
    ours["w"].add_(1.0)
    assert ours["wT"].tolist() == theirs["wT"].tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]


# ---- corrupt structures ---------------------------------------------------------------------
def _with_structure(text: str) -> io.BytesIO:
    buffer = io.BytesIO()
    kiln.io.write_arrays({"w": np.arange(6, dtype=np.float32)}, buffer, {CHECKPOINT_KEY: text})
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize("tree, match", [
    ('{"dict": [["a", 1], ["a", 2]]}', "holds the key 'a' twice"),
    ('{"ordered_dict": [["a", 1], ["b", 2], ["a", 3]]}', "holds the key 'a' twice"),
    ('{"counter": [[1, 1], [1.0, 2]]}', "holds the key 1.0 twice"),
    ('{"dict": [[true, 1], [1, 2]]}', "holds the key 1 twice"),
    ('{"dict": [[{"float": "inf"}, 1], [{"float": "inf"}, 2]]}', "holds the key inf twice"),
    ('{"tensor": "w", "tensor": "w"}', "JSON object with the key 'tensor' twice"),
], ids=["dict", "ordered_dict", "counter", "bool_and_int", "inf", "json_object"])
def test_a_key_twice_is_refused_at_load(tree: str, match: str):
    with pytest.raises(CheckpointError, match=match):
        kiln.load(_with_structure('{"version": 1, "tree": ' + tree + "}"))


def test_nan_keys_are_not_duplicates():
    loaded = kiln.load(_with_structure('{"version": 1, "tree": {"dict": [[{"float": "nan"}, 1], '
                                       '[{"float": "nan"}, 2]]}}'))
    assert sorted(loaded.values()) == [1, 2]


@pytest.mark.parametrize("view, match", [
    ({"of": "w", "offset": 4, "shape": [3], "stride": [1]}, r"reaches elements 4\.\.6 of tensor 'w', which has 6"),
    ({"of": "w", "offset": 0, "shape": [2], "stride": [-1]}, r"reaches elements -1\.\.0"),
    ({"of": "w", "offset": 0, "shape": [2, 2], "stride": [1]}, "as many strides as sizes"),
    ({"of": "w", "offset": -1, "shape": [1], "stride": [1]}, "offset"),
    ({"of": "nope", "offset": 0, "shape": [1], "stride": [1]}, "refers to tensor 'nope'"),
])
def test_a_view_outside_its_tensor_is_refused(view: dict, match: str):
    text = json.dumps({"version": 1, "tree": {"view": view}})
    with pytest.raises(CheckpointError, match=match):
        kiln.load(_with_structure(text))


# ---- nesting depth ---------------------------------------------------------------------------
def _nested(depth: int, kind: str = "list"):
    obj = kiln.ones(1)
    for _ in range(depth):
        obj = {"k": obj} if kind == "dict" else [obj] if kind == "list" else (obj,)
    return obj


@pytest.mark.parametrize("kind", ["dict", "list", "tuple"])
def test_the_deepest_structure_save_accepts_loads(kind: str):
    loaded, _ = _round_trip(_nested(MAX_DEPTH, kind))
    for _ in range(MAX_DEPTH):
        loaded = loaded["k"] if kind == "dict" else loaded[0]
    assert loaded.tolist() == [1.0]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5000])
@pytest.mark.parametrize("kind", ["dict", "list"])
def test_a_structure_too_deep_to_load_is_refused_at_save(depth: int, kind: str):
    with pytest.raises(CheckpointError, match=f"nests too deeply: more than {MAX_DEPTH} .*Fix: ") as info:
        kiln.save(_nested(depth, kind), io.BytesIO())
    assert isinstance(info.value, ValueError) and len(str(info.value)) < 600


def test_a_file_nested_deeper_than_the_limit_is_refused_with_the_same_limit():
    tree = '{"list": [' * (MAX_DEPTH + 1) + "1" + "]}" * (MAX_DEPTH + 1)
    with pytest.raises(CheckpointError, match=f"nests too deeply: more than {MAX_DEPTH} "):
        kiln.load(_with_structure('{"version": 1, "tree": ' + tree + "}"))


# ---- streams whose header claims more than they hold -----------------------------------------
def _claiming(nbytes: int, tail: bytes) -> bytes:
    header = json.dumps({"huge": {"dtype": "F32", "shape": [nbytes // 4], "data_offsets": [0, nbytes]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + tail


def test_an_unseekable_stream_claiming_16_tib_fails_as_truncated_not_out_of_memory():
    claimed = 16 * 2**40
    with pytest.raises(SafetensorsError, match=rf"tensor 'huge' is truncated: .*claims {claimed} bytes.*ended after "
                                               r"1000.*cut short or its header is corrupt"):
        kiln.load(_Pipe(_claiming(claimed, b"\0" * 1000)))


def test_a_seekable_stream_claiming_16_tib_fails_on_its_size():
    with pytest.raises(SafetensorsError, match="do not fit"):
        kiln.load(io.BytesIO(_claiming(16 * 2**40, b"\0" * 1000)))


def test_large_tensors_from_a_pipe_are_read_in_chunks(monkeypatch):
    monkeypatch.setattr(st, "READ_CHUNK", 40)  # every tensor here is larger than a chunk
    ckpt = {"w": kiln.arange(100.0), "mask": kiln.tensor([True, False] * 30), "b": kiln.arange(7, dtype=kiln.int64),
            "tied": None}
    ckpt["tied"] = ckpt["w"][10:20]
    buffer = io.BytesIO()
    kiln.save(ckpt, buffer)
    loaded = kiln.load(_Pipe(buffer.getvalue()))
    assert loaded["w"].tolist() == list(map(float, range(100))) and loaded["b"].tolist() == list(range(7))
    assert loaded["mask"].tolist() == [True, False] * 30
    loaded["w"].add_(1.0)  # chunked arrays are writable and views of them still share memory
    assert loaded["tied"].tolist() == [float(i + 1) for i in range(10, 20)]
    with pytest.raises(SafetensorsError, match="truncated"):
        kiln.load(_Pipe(buffer.getvalue()[:-30]))
