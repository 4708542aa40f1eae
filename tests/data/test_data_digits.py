"""The bundled UCI digits: shapes, value ranges, and a fixed, disjoint train/test split."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.data import DIGITS_PATH, load_digits
from kiln.data.digits import split_indices


@pytest.mark.parametrize("split, n", [("train", 1438), ("test", 359), ("all", 1797)])
def test_shapes_dtypes_and_ranges(split, n):
    images, labels = load_digits(split)
    assert isinstance(images, kiln.Tensor) and isinstance(labels, kiln.Tensor)
    assert tuple(images.shape) == (n, 1, 8, 8) and images.dtype == kiln.float32
    assert tuple(labels.shape) == (n,) and labels.dtype == kiln.int64
    pixels = images.numpy()
    assert pixels.min() == 0.0 and pixels.max() == 1.0
    assert set(np.unique(labels.numpy())) == set(range(10))


def test_split_sizes_disjoint_and_complete():
    train, test = split_indices(1797)
    assert len(train) == 1438 and len(test) == 359
    assert not set(train) & set(test)
    assert sorted(np.concatenate([train, test])) == list(range(1797))


def test_split_rows_match_the_full_set():
    all_x, all_y = (t.numpy() for t in load_digits("all"))
    train_idx, test_idx = split_indices(1797)
    test_x, test_y = (t.numpy() for t in load_digits("test"))
    np.testing.assert_array_equal(test_x, all_x[test_idx])
    np.testing.assert_array_equal(test_y, all_y[test_idx])
    train_x, _ = load_digits("train")
    train_rows = {r.tobytes() for r in train_x.numpy().reshape(len(train_idx), -1)}
    assert len(train_rows & {r.tobytes() for r in test_x.reshape(len(test_idx), -1)}) <= 5  # rare duplicates only


def test_split_is_deterministic_and_shuffled():
    a, b = split_indices(1797), split_indices(1797)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[1], np.arange(1438, 1797)), "the test split should not be the file's tail"
    first, _ = load_digits("test")
    kiln.manual_seed(123)  # the global RNG does not affect the split
    second, _ = load_digits("test")
    np.testing.assert_array_equal(first.numpy(), second.numpy())


def test_returned_tensors_are_independent_copies():
    images, labels = load_digits("train")
    images.numpy()[:] = 5.0
    labels.numpy()[:] = -1
    fresh_images, fresh_labels = load_digits("train")
    assert fresh_images.numpy().max() == 1.0 and fresh_labels.numpy().min() == 0


def test_bad_split_names_the_choices():
    with pytest.raises(ValueError, match="train.*test.*all"):
        load_digits("validation")


def test_data_and_attribution_ship_in_the_package():
    assert DIGITS_PATH.is_file() and 40_000 < DIGITS_PATH.stat().st_size < 80_000
    license_text = DIGITS_PATH.with_name("DIGITS_LICENSE.txt").read_text()
    assert "CC BY 4.0" in license_text and "Alpaydin" in license_text and "Kaynak" in license_text
