"""DataLoader and datasets: batching, collation, shuffling determinism, drop_last."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.data import DataLoader, Dataset, TensorDataset, default_collate


def _dataset(n: int = 10) -> TensorDataset:
    return TensorDataset(kiln.arange(n * 3, dtype=kiln.float32).reshape(n, 3), kiln.arange(n))


def _order(loader: DataLoader) -> list[int]:
    return [int(i) for _, y in loader for i in y.numpy()]


def test_batches_have_the_right_shapes_and_types():
    loader = DataLoader(_dataset(10), batch_size=4)
    batches = list(loader)
    assert len(loader) == 3 and len(batches) == 3
    assert [tuple(x.shape) for x, _ in batches] == [(4, 3), (4, 3), (2, 3)]
    x, y = batches[0]
    assert isinstance(x, kiln.Tensor) and x.dtype == kiln.float32 and y.dtype == kiln.int64
    np.testing.assert_array_equal(x.numpy(), np.arange(12, dtype=np.float32).reshape(4, 3))


def test_drop_last_drops_the_short_batch():
    loader = DataLoader(_dataset(10), batch_size=4, drop_last=True)
    assert len(loader) == 2
    assert [tuple(x.shape) for x, _ in loader] == [(4, 3), (4, 3)]
    assert len(DataLoader(_dataset(8), batch_size=4, drop_last=True)) == 2


def test_without_shuffle_the_order_is_kept():
    assert _order(DataLoader(_dataset(10), batch_size=3)) == list(range(10))


def test_shuffle_is_deterministic_per_seed_and_changes_each_epoch():
    a = DataLoader(_dataset(50), batch_size=8, shuffle=True, seed=7)
    b = DataLoader(_dataset(50), batch_size=8, shuffle=True, seed=7)
    epoch1_a, epoch1_b = _order(a), _order(b)
    assert epoch1_a == epoch1_b
    assert sorted(epoch1_a) == list(range(50)) and epoch1_a != list(range(50))
    epoch2_a = _order(a)
    assert sorted(epoch2_a) == list(range(50)) and epoch2_a != epoch1_a
    assert _order(b) == epoch2_a
    assert _order(DataLoader(_dataset(50), batch_size=8, shuffle=True, seed=8)) != epoch1_a


def test_shuffle_with_generator_and_global_seed():
    a = DataLoader(_dataset(30), batch_size=5, shuffle=True, generator=kiln.Generator(3))
    b = DataLoader(_dataset(30), batch_size=5, shuffle=True, generator=kiln.Generator(3))
    assert _order(a) == _order(b)
    kiln.manual_seed(11)
    first = _order(DataLoader(_dataset(30), batch_size=5, shuffle=True))
    kiln.manual_seed(11)
    assert _order(DataLoader(_dataset(30), batch_size=5, shuffle=True)) == first


def test_shuffled_batches_keep_inputs_and_labels_together():
    for x, y in DataLoader(_dataset(20), batch_size=6, shuffle=True, seed=1):
        np.testing.assert_array_equal(x.numpy()[:, 0], 3 * y.numpy())


def test_tuple_of_tensors_is_wrapped_in_a_tensor_dataset():
    x, y = next(iter(DataLoader((kiln.ones(5, 2), kiln.zeros(5)), batch_size=5)))
    assert tuple(x.shape) == (5, 2) and tuple(y.shape) == (5,)


class Pairs(Dataset):
    """A custom map-style dataset of (array, float, int, dict) samples."""

    def __len__(self) -> int:
        return 5

    def __getitem__(self, i: int):
        return np.full(2, i, dtype=np.float32), float(i), i, {"id": i}


def test_custom_dataset_samples_are_collated_field_by_field():
    arr, floats, ints, meta = next(iter(DataLoader(Pairs(), batch_size=3)))
    assert tuple(arr.shape) == (3, 2)
    assert floats.dtype == kiln.float32 and floats.tolist() == [0.0, 1.0, 2.0]
    assert ints.dtype == kiln.int64 and ints.tolist() == [0, 1, 2]
    assert meta["id"].tolist() == [0, 1, 2]


def test_custom_collate_fn_gets_the_list_of_samples():
    batches = list(DataLoader(Pairs(), batch_size=2, collate_fn=len))
    assert batches == [2, 2, 1]


def test_default_collate_stacks_tensors():
    out = default_collate([kiln.ones(2), kiln.zeros(2)])
    assert tuple(out.shape) == (2, 2)


def test_tensor_dataset_indexing_returns_rows():
    x, y = _dataset(4)[2]
    assert x.tolist() == [6.0, 7.0, 8.0] and int(y.item()) == 2
    assert len(_dataset(4)) == 4


@pytest.mark.parametrize("bad, message", [
    (lambda: TensorDataset(kiln.ones(3, 2), kiln.ones(4)), "same first dimension"),
    (lambda: TensorDataset(), "at least one"),
    (lambda: DataLoader(_dataset(), batch_size=0), "batch_size"),
    (lambda: DataLoader(_dataset(), batch_size=2, seed=1, generator=kiln.Generator(1)), "seed= or generator="),
    (lambda: default_collate([]), "empty"),
])
def test_bad_arguments_raise_value_errors(bad, message):
    with pytest.raises(ValueError, match=message):
        bad()


def test_unknown_sample_types_raise_type_error():
    with pytest.raises(TypeError, match="collate_fn"):
        default_collate([object(), object()])
    with pytest.raises(TypeError, match="Dataset"):
        DataLoader(42)
