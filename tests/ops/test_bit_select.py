"""kiln.ops.bit_select: np.where's bits and memory layout, computed without branches."""
from __future__ import annotations

import numpy as np
import pytest

from kiln.ops.bit_select import MIN_ELEMENTS, bit_select

SHAPE = (8, 16, 24, 6)  # 18,432 elements: above MIN_ELEMENTS


def _values(dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(SHAPE) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(np.iinfo(dtype).min // 2, np.iinfo(dtype).max // 2, SHAPE).astype(dtype)
    x = (rng.standard_normal(SHAPE) * 100).astype(dtype)
    x.flat[:6] = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0]
    return x


def _same(got, c, a, b) -> None:
    want = np.where(c, a, b)
    assert got is not None
    assert got.dtype == want.dtype and got.shape == want.shape and got.strides == want.strides
    np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_])
def test_full_operands_match_where_bit_for_bit(dtype):
    c = np.random.default_rng(0).random(SHAPE) < 0.5
    a, b = _values(dtype, 1), _values(dtype, 2)
    _same(bit_select(c, a, b), c, a, b)


@pytest.mark.parametrize("zero", [0.0, -0.0, 1.5, np.nan])
def test_scalar_branches_keep_their_bits(zero):
    c = np.random.default_rng(0).random(SHAPE) < 0.3
    a, z = _values(np.float32, 1), np.array(zero, np.float32)
    _same(bit_select(c, a, z), c, a, z)  # a ReLU-style gradient: where(mask, g, 0)
    _same(bit_select(c, z, a), c, z, a)
    _same(bit_select(c, z, np.array(2.0, np.float32)), c, z, np.array(2.0, np.float32))


@pytest.mark.parametrize("perm", [(0, 1, 2, 3), (1, 0, 2, 3), (3, 2, 1, 0), (0, 2, 3, 1)])
def test_a_shared_transposed_layout_is_kept(perm):
    inverse = np.argsort(perm)
    lay = lambda x: np.ascontiguousarray(x.transpose(perm)).transpose(inverse)  # noqa: E731
    c = lay(np.random.default_rng(0).random(SHAPE) < 0.5)
    a, b = lay(_values(np.float32, 1)), lay(_values(np.float32, 2))
    _same(bit_select(c, a, b), c, a, b)
    _same(bit_select(c, a, np.zeros((), np.float32)), c, a, np.zeros((), np.float32))


def test_cases_it_leaves_to_where():
    c = np.random.default_rng(0).random(SHAPE) < 0.5
    a = _values(np.float32, 1)
    assert bit_select(c[:2, :2], a[:2, :2], a[:2, :2]) is None  # small: one np.where pass is cheaper
    assert 4 * 4 * 24 * 6 < MIN_ELEMENTS
    assert bit_select(c, a, a[:1]) is None  # broadcasting along a dim
    assert bit_select(c, a, a.astype(np.float64)) is None  # two dtypes
    assert bit_select(c, a, np.ascontiguousarray(a.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)) is None
    wide_c, wide_a = np.concatenate([c, c], 2), np.concatenate([a, a], 2)
    assert bit_select(wide_c[:, :, ::2], wide_a[:, :, ::2], wide_a[:, :, ::2]) is None  # strided: not dense
    assert bit_select(c.astype(np.int8), a, a) is None  # a condition that is not bool
    assert bit_select(c, a.astype(object), a.astype(object)) is None
