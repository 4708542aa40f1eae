"""Converting NumPy data into kiln tensors never loses a value silently.

A dtype kiln lacks is converted to one that holds every value (a non-native byte order
is swapped, narrow integers widen to int64), or the conversion raises naming the dtype,
the value and the fix. Compared with PyTorch where it is installed.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.utils.data import TensorDataset, default_collate, default_convert

CREATORS = {
    "tensor": kiln.tensor,
    "from_numpy": kiln.from_numpy,
    "as_tensor": kiln.as_tensor,
    "Tensor": kiln.Tensor,
}
NON_NATIVE = ">" if np.little_endian else "<"


@pytest.mark.parametrize("make", CREATORS.values(), ids=CREATORS.keys())
@pytest.mark.parametrize("code, dtype, values", [
    ("f8", kiln.float64, [1e300, -2.5e-310, np.inf, 3.0]),
    ("f4", kiln.float32, [3.4e38, 1e-40, -0.0, 7.0]),
    ("f2", kiln.float16, [65504.0, 6e-8, 1.0, -2.0]),
    ("i8", kiln.int64, [2**62 + 1, -(2**63), 5, 0]),
    ("i4", kiln.int32, [2**31 - 1, -(2**31), 5, 0]),
])
def test_non_native_byte_order_keeps_dtype_and_values(make, code: str, dtype, values: list) -> None:
    swapped = np.array(values, dtype=NON_NATIVE + code)
    t = make(swapped)
    assert t.dtype == dtype
    assert t.numpy().dtype.isnative
    np.testing.assert_array_equal(t.numpy(), swapped.astype(dtype.np))


def test_big_endian_float64_matches_native_float64() -> None:
    native = np.array([[1e300, 2.0]])
    big = native.astype(">f8")
    for make in (kiln.tensor, kiln.from_numpy):
        assert make(big).dtype == make(native).dtype == kiln.float64
        assert make(big).numpy()[0, 0] == 1e300  # was inf: the array went through float32


def test_big_endian_from_numpy_copies_and_native_shares() -> None:
    native = np.zeros(3)
    kiln.from_numpy(native).add_(1.0)
    assert native.tolist() == [1.0, 1.0, 1.0]
    big = np.zeros(3, dtype=">f8")
    t = kiln.from_numpy(big)
    t.add_(1.0)
    assert t.tolist() == [1.0, 1.0, 1.0]


def test_non_native_scalar_and_bool() -> None:
    assert kiln.tensor(np.array(1e300, dtype=">f8")).item() == 1e300
    assert kiln.tensor(np.array([True, False])).dtype == kiln.bool


@pytest.mark.parametrize("make", [kiln.tensor, kiln.from_numpy, kiln.as_tensor, kiln.Tensor])
def test_uint64_above_int64_raises_naming_dtype_value_and_fix(make) -> None:
    big = np.array([1, 2**63 + 5], dtype=np.uint64)
    with pytest.raises(kiln.DTypeOverflowError, match=r"uint64 value 9223372036854775813.*Fix: .*astype"):
        make(big)


def test_uint64_scalar_above_int64_raises() -> None:
    with pytest.raises(kiln.DTypeOverflowError, match="9223372036854775813"):
        kiln.tensor(np.uint64(2**63 + 5))


def test_uint64_in_range_converts_exactly() -> None:
    t = kiln.from_numpy(np.array([0, 2**63 - 1], dtype=np.uint64))
    assert t.dtype == kiln.int64
    assert t.tolist() == [0, 2**63 - 1]


def test_uint64_with_an_explicit_float_dtype_is_the_users_choice() -> None:
    t = kiln.tensor(np.array([2**63 + 4096], dtype=np.uint64), dtype=kiln.float64)
    assert t.item() == float(2**63 + 4096)


@pytest.mark.parametrize("code", ["u1", "u2", "u4", "i1", "i2"])
def test_narrow_integers_widen_without_wrapping(code: str) -> None:
    info = np.iinfo(np.dtype(code))
    arr = np.array([info.min, info.max], dtype=code)
    for make in (kiln.tensor, kiln.from_numpy):
        t = make(arr)
        assert t.dtype == kiln.int64
        assert t.tolist() == [info.min, info.max]
        assert (t + 1).tolist() == [info.min + 1, info.max + 1]


@pytest.mark.skipif(np.finfo(np.longdouble).nmant <= np.finfo(np.float64).nmant, reason="longdouble is float64 here")
def test_longdouble_converts_when_exact_and_raises_when_not() -> None:
    assert kiln.tensor(np.array([1.5, np.nan, -np.inf], dtype=np.longdouble)).dtype == kiln.float64
    fine = np.longdouble(1) + np.longdouble(2) ** -60
    with pytest.raises(TypeError, match=r"float64.*cannot hold exactly.*Fix: .*astype\(np.float64\)"):
        kiln.from_numpy(np.array([fine]))
    with pytest.raises(TypeError, match="would become np.float64\\(inf\\)|would become inf"):
        kiln.tensor(np.array([np.longdouble("1e4000")]))


def test_python_ints_beyond_int64_raise() -> None:
    for data in ([2**63 + 5], [2**64], [-(2**63) - 1], 2**63):
        with pytest.raises(kiln.DTypeOverflowError, match="int64"):
            kiln.tensor(data)


def test_arange_past_int64_raises_instead_of_wrapping() -> None:
    with pytest.raises(kiln.DTypeOverflowError, match=r"arange\(\): value 9223372036854775809"):
        kiln.arange(2**63 - 2, 2**63 + 2)
    with pytest.raises(kiln.DTypeOverflowError, match="int32"):
        kiln.arange(2**31 - 2, 2**31 + 2, dtype=kiln.int32)
    assert kiln.arange(2**63 - 2, 2**63 - 1).tolist() == [2**63 - 2]
    assert kiln.arange(10, 0, -3).tolist() == [10, 7, 4, 1]
    assert kiln.arange(3, 3).tolist() == []


def test_collate_and_datasets_keep_integer_values() -> None:
    images = [np.full(4, 255, dtype=np.uint8) for _ in range(3)]
    batch = default_collate(images)
    assert batch.dtype == kiln.int64 and batch.sum().item() == 255 * 12  # uint8 data summed to 244
    assert default_convert(np.full(2, 200, dtype=np.uint8)).sum().item() == 400
    assert default_convert(np.uint8(200)).item() + 100 == 300
    row = TensorDataset(np.full((2, 3), 255, dtype=np.uint8))[0][0]
    assert row.dtype == kiln.int64 and row.sum().item() == 765
    assert default_collate([np.array([1e300], dtype=">f8")] * 2).tolist() == [[1e300], [1e300]]
    with pytest.raises(kiln.DTypeOverflowError, match="uint64"):
        default_collate([np.array([2**63 + 5], dtype=np.uint64)] * 2)


def test_dataset_of_native_arrays_still_shares_memory() -> None:
    data = np.zeros((2, 3), dtype=np.float32)
    ds = TensorDataset(data)
    assert ds.arrays[0] is data


def test_torch_agrees_where_it_keeps_values() -> None:
    torch = pytest.importorskip("torch")
    for code in ("u1", "u2", "i1", "i2"):
        arr = np.array([np.iinfo(code).min, np.iinfo(code).max], dtype=code)
        assert kiln.tensor(arr).tolist() == torch.tensor(arr).tolist()
    if hasattr(torch, "uint64"):  # PyTorch keeps the value; kiln, without uint64, refuses
        big = np.array([2**63 + 5], dtype=np.uint64)
        assert torch.tensor(big).tolist() == [2**63 + 5]
        with pytest.raises(kiln.DTypeOverflowError):
            kiln.tensor(big)
        with pytest.raises(kiln.DTypeOverflowError, match="uint64"):
            kiln.from_dlpack(torch.tensor(big))
