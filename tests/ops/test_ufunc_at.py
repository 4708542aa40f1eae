"""kiln.ops.ufunc_at gives the same bits as NumPy's ufunc.at with the index tuple, in the same order."""
from __future__ import annotations

import numpy as np
import pytest

from kiln.ops.ufunc_at import _flat_positions, ufunc_at


def _both(ufunc, shape, where, values):
    expected = np.zeros(shape, np.float32) + 0.5
    got = expected.copy()
    ufunc.at(expected, where, values)
    ufunc_at(np, ufunc, got, where, values)
    return expected, got


@pytest.mark.parametrize("ufunc", [np.add, np.multiply, np.maximum, np.minimum])
def test_scatter_along_each_axis_matches_ufunc_at(ufunc):
    rng = np.random.default_rng(0)
    shape = (7, 5, 6)
    for axis in range(3):
        idx = rng.integers(-shape[axis], shape[axis], (9, 5, 6) if axis == 0 else (7, 4, 6) if axis == 1 else (7, 5, 11))
        grid = list(np.indices(idx.shape, sparse=True))
        grid[axis] = idx
        values = rng.standard_normal(idx.shape).astype(np.float32) * 1e3
        expected, got = _both(ufunc, shape, tuple(grid), values)
        assert _flat_positions(np, got, tuple(grid)) is not None  # the fast path was taken
        np.testing.assert_array_equal(got.view(np.int32), expected.view(np.int32))


def test_rows_with_trailing_dims_and_broadcast_values():
    rng = np.random.default_rng(1)
    idx = rng.integers(0, 50, 300)  # many repeats: the summation order decides the bits
    values = rng.standard_normal((300, 8)).astype(np.float32)
    expected, got = _both(np.add, (50, 8), (idx,), values)
    np.testing.assert_array_equal(got.view(np.int32), expected.view(np.int32))
    expected, got = _both(np.add, (50, 8), (idx,), np.float32(2.5))  # a scalar broadcasts to every position
    np.testing.assert_array_equal(got, expected)


def test_trailing_whole_slices_take_the_flat_path():
    rng = np.random.default_rng(3)
    idx = rng.integers(-20, 20, 200)
    values = rng.standard_normal((200, 6, 3)).astype(np.float32)
    where = (idx, slice(None), slice(None))  # an index_select gradient's index
    got = np.zeros((20, 6, 3), np.float32)
    assert _flat_positions(np, got, where) is not None
    expected = got.copy()
    np.add.at(expected, where, values)
    ufunc_at(np, np.add, got, where, values)
    np.testing.assert_array_equal(got.view(np.int32), expected.view(np.int32))


def test_two_index_arrays_then_a_trailing_dim():
    rng = np.random.default_rng(2)
    i, j = rng.integers(0, 4, (6, 1)), rng.integers(-3, 3, (1, 5))
    values = rng.standard_normal((6, 5, 2)).astype(np.float32)
    expected, got = _both(np.add, (4, 3, 2), (i, j), values)
    np.testing.assert_array_equal(got, expected)


def test_out_of_range_still_raises_numpys_index_error():
    out = np.zeros((3, 2), np.float32)
    with pytest.raises(IndexError):
        ufunc_at(np, np.add, out, (np.array([0, 3]),), np.ones((2, 2), np.float32))
    with pytest.raises(IndexError):
        ufunc_at(np, np.add, out, (np.array([-4]),), np.ones((1, 2), np.float32))


def test_slices_and_booleans_fall_back_to_ufunc_at():
    out = np.zeros((4, 3), np.float32)
    where = (slice(None), np.array([0, 0, 2]))  # a whole slice before an index array
    assert _flat_positions(np, out, where) is None
    expected = out.copy()
    np.add.at(expected, where, 1.0)
    ufunc_at(np, np.add, out, where, 1.0)
    np.testing.assert_array_equal(out, expected)
    mask = (np.array([True, False, True, False]),)
    assert _flat_positions(np, out, mask) is None
