"""kiln.save / kiln.load: bit-exact round trips, the on-disk format, and clear errors."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import kiln
from kiln.io import SafetensorsError

DTYPES = ["float16", "float32", "float64", "int32", "int64", "bool"]


def _sample(dtype: str, shape: tuple, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.startswith("int"):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (5,), (2, 3, 4)])
def test_round_trip_is_bit_exact(tmp_path, dtype, shape):
    array = _sample(dtype, shape)
    path = tmp_path / "t.safetensors"
    kiln.save({"x": kiln.from_numpy(array)}, path)
    loaded = kiln.load(path)["x"]
    assert loaded.dtype == kiln.tensor(array).dtype
    assert tuple(loaded.shape) == shape
    assert loaded.numpy().tobytes() == array.tobytes()


def test_special_float_values_survive(tmp_path):
    array = np.array([np.nan, np.inf, -np.inf, -0.0, np.finfo(np.float32).tiny / 2], np.float32)
    kiln.save({"x": array}, tmp_path / "s.safetensors")
    assert kiln.load(tmp_path / "s.safetensors")["x"].tobytes() == array.tobytes()


def test_views_and_non_contiguous_tensors_are_saved_by_value(tmp_path):
    base = kiln.arange(12, dtype=kiln.float32).reshape(3, 4)
    state = {"t": base.t(), "col": base[:, 1], "flipped": base.flip(0)}
    kiln.save(state, tmp_path / "v.safetensors")
    loaded = kiln.load(tmp_path / "v.safetensors")
    for name, t in state.items():
        np.testing.assert_array_equal(loaded[name].numpy(), t.numpy())


def test_big_endian_arrays_are_written_little_endian(tmp_path):
    array = np.arange(4, dtype=">i4")
    kiln.save({"x": array}, tmp_path / "b.safetensors")
    loaded = kiln.load(tmp_path / "b.safetensors")["x"]
    assert loaded.dtype == np.dtype("<i4") and loaded.tolist() == [0, 1, 2, 3]


def test_state_dict_round_trip_restores_the_model(tmp_path):
    model = kiln.models.mlp(16, (8,), 4)
    kiln.save(model.state_dict(), tmp_path / "m.safetensors")
    loaded = kiln.load(tmp_path / "m.safetensors")
    assert sorted(loaded) == sorted(model.state_dict())
    fresh = kiln.models.mlp(16, (8,), 4)
    fresh.load_state_dict(loaded)
    x = kiln.randn(3, 16)
    np.testing.assert_array_equal(fresh(x).detach().numpy(), model(x).detach().numpy())


def test_loaded_tensors_are_writable_and_own_their_data(tmp_path):
    kiln.save({"x": kiln.ones(3)}, tmp_path / "w.safetensors")
    t = kiln.load(tmp_path / "w.safetensors")["x"]
    t.add_(1.0)
    np.testing.assert_array_equal(t.numpy(), [2.0, 2.0, 2.0])


def test_file_layout_follows_the_safetensors_spec(tmp_path):
    path = tmp_path / "f.safetensors"
    kiln.save({"b": kiln.tensor([1, 2]), "a": kiln.ones(2, 2)}, path, metadata={"format": "kiln"})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert (8 + n) % 8 == 0
    header = json.loads(raw[8:8 + n])
    assert header["__metadata__"] == {"format": "kiln"}
    assert header["a"] == {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}
    assert header["b"] == {"dtype": "I64", "shape": [2], "data_offsets": [16, 32]}
    assert raw[8 + n:] == np.ones(4, "<f4").tobytes() + np.array([1, 2], "<i8").tobytes()
    assert kiln.io.load_metadata(path) == {"format": "kiln"}


def test_load_returns_names_in_sorted_order_and_device(tmp_path):
    kiln.save({"z": kiln.zeros(1), "a": kiln.zeros(1), "m": kiln.zeros(1)}, tmp_path / "o.safetensors")
    loaded = kiln.load(tmp_path / "o.safetensors", device="cpu")
    assert list(loaded) == ["a", "m", "z"]
    assert all(t.device == "cpu" for t in loaded.values())


def test_save_replaces_an_existing_file(tmp_path):
    path = tmp_path / "r.safetensors"
    kiln.save({"x": kiln.zeros(100)}, path)
    kiln.save({"y": kiln.ones(2)}, path)
    assert list(kiln.load(path)) == ["y"]
    assert [p.name for p in tmp_path.iterdir()] == ["r.safetensors"]  # no temporary files left


# ---- errors ---------------------------------------------------------------------------
def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nope.safetensors"
    with pytest.raises(FileNotFoundError, match="nope.safetensors") as info:
        kiln.load(path)
    assert info.value.filename == str(path)


@pytest.mark.parametrize("content, why", [
    (b"", "fewer than the 8-byte"),
    (b"\x80\x02}q\x00.", "fewer than the 8-byte"),  # a tiny pickle
    (struct.pack("<Q", 1 << 40) + b"{}", "header length"),
    (struct.pack("<Q", 4) + b"\xff\xfe{}", "not valid UTF-8 JSON"),
    (struct.pack("<Q", 2) + b"[]", "expected an object"),
    (struct.pack("<Q", 8) + b'{"a":1} ', "expected"),
])
def test_corrupt_header_says_not_a_safetensors_file(tmp_path, content, why):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="is not a safetensors file") as info:
        kiln.load(path)
    assert why in str(info.value)
    assert isinstance(info.value, SafetensorsError)


def test_a_pickle_file_is_refused_without_unpickling(tmp_path):
    import pickle

    path = tmp_path / "model.pt"
    path.write_bytes(pickle.dumps({"w": np.ones(1000)}))
    with pytest.raises(SafetensorsError, match="never loads pickles"):
        kiln.load(path)


def _write_raw(path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


@pytest.mark.parametrize("header, data, why", [
    ({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4, "needs 8 bytes"),
    ({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, "do not fit"),
    ({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, "sizes >= 0"),
    ({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 8, "cover 4 bytes"),
    ({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
      "y": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 8, "overlaps"),
    ({"x": {"dtype": "BOOL", "shape": [1], "data_offsets": [0, 1]}}, b"\x07", "other than 0 and 1"),
    ({"x": {"shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "expected {'dtype'"),
])
def test_inconsistent_entries_are_rejected(tmp_path, header, data, why):
    path = tmp_path / "bad.safetensors"
    _write_raw(path, header, data)
    with pytest.raises(SafetensorsError, match="not a safetensors file") as info:
        kiln.load(path)
    assert why in str(info.value)


def test_unsupported_dtype_in_file_names_dtype_and_fix(tmp_path):
    path = tmp_path / "u16.safetensors"
    _write_raw(path, {"x": {"dtype": "U16", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4)
    with pytest.raises(ValueError, match=r"'x' has dtype U16.*supported: BOOL, F16, F32, F64, I32, I64"):
        kiln.load(path)


def test_unsupported_dtype_on_save_names_the_tensor(tmp_path):
    with pytest.raises(TypeError, match=r"cannot save 'x': dtype uint8"):
        kiln.save({"x": np.zeros(2, np.uint8)}, tmp_path / "u.safetensors")


@pytest.mark.parametrize("obj, needs", [
    ({(1, 2): kiln.zeros(1)}, None),  # a tuple key: pickled, and plain data needs no global
    ({"x": [1.0, {2.0}]}, None),
    ({"x": object()}, r"needs builtins\.object"),
])
def test_what_a_checkpoint_tree_cannot_hold_is_pickled(tmp_path, obj, needs):
    kiln.save(obj, tmp_path / "x.pt")
    if needs:
        with pytest.raises(kiln.io.PickledCheckpointError, match=needs):
            kiln.load(tmp_path / "x.pt")
    loaded = kiln.load(tmp_path / "x.pt", weights_only=False)
    assert list(loaded) == list(obj)


def test_metadata_must_be_strings(tmp_path):
    with pytest.raises(TypeError, match="metadata must map str to str"):
        kiln.save({"x": kiln.zeros(1)}, tmp_path / "x.safetensors", metadata={"epoch": 3})


def test_unwritable_path_raises_oserror(tmp_path):
    with pytest.raises(OSError):
        kiln.save({"x": kiln.zeros(1)}, tmp_path / "missing-dir" / "x.safetensors")
