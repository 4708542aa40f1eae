"""The UCI handwritten digits (1,797 8x8 images, 10 classes, CC BY 4.0), bundled with kiln.

The data ship inside the package (``kiln/data/digits.csv.gz``, see DIGITS_LICENSE.txt);
nothing is downloaded. The train/test split is fixed: the images are permuted once
by kiln's counter-based RNG with a constant seed, and the last 20% are the test set.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from ..random import philox_bits
from ..tensor import Tensor

DIGITS_PATH = Path(__file__).with_name("digits.csv.gz")
SPLIT_SEED = 1998  # the fixed permutation behind the train/test split; never change it
TEST_FRACTION = 0.2
SPLITS = ("train", "test", "all")


@functools.lru_cache(maxsize=1)
def _raw() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 images as (N, 64) float32 in 0..16 and labels as (N,) int64 (read once)."""
    if not DIGITS_PATH.is_file():
        raise FileNotFoundError(f"the bundled digits data is missing at {DIGITS_PATH}; reinstall kiln "
                                "(pip install -e .) so the package data is included")
    table = np.loadtxt(DIGITS_PATH, delimiter=",", dtype=np.float32)
    return table[:, :-1], table[:, -1].astype(np.int64)


def split_indices(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The fixed (train, test) row indices for n samples: a seeded permutation, last 20% test."""
    keys = philox_bits(np, SPLIT_SEED, 0, n)
    order = np.argsort(keys, kind="stable")
    n_test = int(n * TEST_FRACTION)
    return order[: n - n_test], order[n - n_test:]


def load_digits(split: str = "train") -> tuple[Tensor, Tensor]:
    """The digits as (images, labels): float32 (N, 1, 8, 8) in [0, 1] and int64 (N,) in 0..9.

    `split` is "train" (1,438 images), "test" (359) or "all" (1,797).

    >>> images, labels = kiln.data.load_digits("test")
    >>> images.shape, labels.shape
    ((359, 1, 8, 8), (359,))
    """
    if split not in SPLITS:
        raise ValueError(f"load_digits: split must be one of {SPLITS}, got {split!r}")
    pixels, labels = _raw()
    if split != "all":
        train, test = split_indices(len(labels))
        rows = train if split == "train" else test
        pixels, labels = pixels[rows], labels[rows]
    images = (pixels / np.float32(16.0)).reshape(-1, 1, 8, 8)
    return Tensor._wrap(np.ascontiguousarray(images)), Tensor._wrap(labels.copy())
