"""DataLoader arguments with PyTorch's meanings: sampler, batch_sampler, collate_fn, batch_size=None, errors."""
from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import kiln
from kiln.utils.data import (BatchSampler, DataLoader, RandomSampler, SequentialSampler, TensorDataset,
                             default_collate, default_convert)

torch = pytest.importorskip("torch")
tud = torch.utils.data

Point = namedtuple("Point", ["x", "label"])


class Samples:
    """A plain sequence of heterogeneous samples (no Dataset base class needed, as in PyTorch)."""

    def __init__(self, lib: str):
        self.lib = lib

    def __len__(self) -> int:
        return 7

    def __getitem__(self, i: int):
        arr = np.array([i, -i, 0.5 * i], dtype=np.float32)
        return {"x": arr, "pair": (i, float(i) * 1.5), "point": Point(arr[:2], i % 2), "name": f"s{i}"}


def _flatten(batch, lib: str) -> list:
    """Leaves of a collated batch as NumPy arrays (strings kept), in a fixed order."""
    if isinstance(batch, str):
        return [[batch]]
    if isinstance(batch, (int, float)):
        return [np.asarray(batch)]
    if isinstance(batch, dict):
        return [leaf for key in sorted(batch) for leaf in _flatten(batch[key], lib)]
    if isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], str):
        return [list(batch)]
    if isinstance(batch, (tuple, list)):
        return [leaf for item in batch for leaf in _flatten(item, lib)]
    return [np.asarray(batch.numpy())]


def _assert_same(ours: list, theirs: list) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        fa, fb = _flatten(a, "kiln"), _flatten(b, "torch")
        assert len(fa) == len(fb)
        for x, y in zip(fa, fb):
            if isinstance(x, list):
                assert x == y
            else:
                assert x.shape == y.shape
                np.testing.assert_allclose(x, y)  # values; Python floats are float32 here, float64 in torch


@pytest.mark.parametrize("kwargs", [dict(batch_size=3), dict(batch_size=3, drop_last=True), dict(batch_size=1),
                                    dict(batch_size=None)])
def test_batches_of_nested_samples_match_torch(kwargs: dict) -> None:
    _assert_same(list(DataLoader(Samples("kiln"), **kwargs)), list(tud.DataLoader(Samples("torch"), **kwargs)))


def test_sampler_and_batch_sampler_match_torch() -> None:
    order = [6, 2, 0, 5]
    _assert_same(list(DataLoader(Samples("kiln"), batch_size=2, sampler=order)),
                 list(tud.DataLoader(Samples("torch"), batch_size=2, sampler=order)))
    batches = [[1, 2, 3], [6], [0, 4]]
    _assert_same(list(DataLoader(Samples("kiln"), batch_sampler=batches)),
                 list(tud.DataLoader(Samples("torch"), batch_sampler=batches)))
    ours = DataLoader(Samples("kiln"), batch_sampler=BatchSampler(SequentialSampler(range(7)), 3, True))
    assert len(ours) == 2 and ours.batch_size is None


def test_lengths_match_torch() -> None:
    for kwargs in (dict(batch_size=3), dict(batch_size=3, drop_last=True), dict(batch_size=None),
                   dict(batch_size=2, sampler=[1, 2, 3])):
        assert len(DataLoader(Samples("kiln"), **kwargs)) == len(tud.DataLoader(Samples("torch"), **kwargs)), kwargs


def test_collate_fn_gets_the_list_of_samples() -> None:
    seen = []
    loader = DataLoader(list(range(5)), batch_size=2, collate_fn=lambda samples: seen.append(samples) or len(samples))
    assert list(loader) == [2, 2, 1] and seen == [[0, 1], [2, 3], [4]]


def test_a_list_is_a_dataset_of_samples_and_a_tuple_of_tensors_a_tensor_dataset() -> None:
    assert [b.tolist() for b in DataLoader([3, 1, 2], batch_size=2)] == [[3, 1], [2]]
    x, y = next(iter(DataLoader((kiln.ones(4, 2), kiln.arange(4)), batch_size=4)))
    assert tuple(x.shape) == (4, 2) and y.tolist() == [0, 1, 2, 3]


def test_shuffle_uses_a_random_sampler_driven_by_the_generator() -> None:
    ds = TensorDataset(kiln.arange(30))
    loader = DataLoader(ds, batch_size=30, shuffle=True, generator=kiln.Generator(9))
    assert isinstance(loader.sampler, RandomSampler) and loader.sampler.generator is loader.generator
    first, second = (next(iter(loader))[0].tolist() for _ in range(2))
    assert sorted(first) == list(range(30)) and first != second
    again = DataLoader(ds, batch_size=30, shuffle=True, generator=kiln.Generator(9))
    assert next(iter(again))[0].tolist() == first
    assert next(iter(DataLoader(ds, batch_size=30, shuffle=True, seed=9)))[0].tolist() == first


def test_default_collate_matches_torch_shapes_and_values() -> None:
    samples = [(np.full((2, 2), i, dtype=np.float32), i, True, kiln.tensor(float(i))) for i in range(3)]
    ours = default_collate(samples)
    theirs = tud.default_collate([(a, i, b, torch.tensor(t.item())) for a, i, b, t in samples])
    for o, t in zip(ours, theirs):
        assert tuple(o.shape) == tuple(t.shape)
        np.testing.assert_array_equal(o.numpy(), t.numpy())
    assert ours[1].dtype == kiln.int64 and ours[2].dtype == kiln.bool and ours[3].dtype == kiln.float32


def test_default_convert_matches_torch() -> None:
    data = {"a": np.arange(3), "b": [np.float32(2.5), "text"], "c": 4}
    ours, theirs = default_convert(data), tud.default_convert(data)
    assert ours["a"].tolist() == theirs["a"].tolist() and isinstance(ours["a"], kiln.Tensor)
    assert isinstance(ours["b"][0], kiln.Tensor) and float(ours["b"][0]) == float(theirs["b"][0])
    assert ours["b"][1] == "text" and ours["c"] == 4


@pytest.mark.parametrize("samples, message", [
    ([kiln.ones(2), kiln.ones(3)], "same shape"),
    ([np.ones(2), np.ones(3)], "same shape"),
    ([(1, 2), (1,)], "different numbers of fields"),
])
def test_default_collate_rejects_ragged_samples(samples, message) -> None:
    with pytest.raises(ValueError, match=message):
        default_collate(samples)


@pytest.mark.parametrize("kwargs, message", [
    (dict(sampler=[0, 1], shuffle=True), "mutually exclusive with shuffle"),
    (dict(batch_sampler=[[0]], batch_size=2), "batch_sampler option is mutually exclusive"),
    (dict(batch_sampler=[[0]], drop_last=True), "batch_sampler option is mutually exclusive"),
    (dict(batch_sampler=[[0]], sampler=[0]), "batch_sampler option is mutually exclusive"),
    (dict(batch_size=None, drop_last=True), "batch_size=None"),
    (dict(batch_size=-2), "batch_size"),
])
def test_conflicting_options_raise_like_torch(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DataLoader(Samples("kiln"), **kwargs)
    with pytest.raises(ValueError):
        tud.DataLoader(Samples("torch"), **kwargs)


def test_a_generator_of_the_wrong_kind_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="kiln.Generator"):
        DataLoader(Samples("kiln"), shuffle=True, generator=torch.Generator())
