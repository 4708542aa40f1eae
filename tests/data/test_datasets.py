"""Datasets: TensorDataset rows, Subset, ConcatDataset, random_split and iterable datasets, against PyTorch."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.utils.data import (ChainDataset, ConcatDataset, DataLoader, Dataset, IterableDataset, Subset,
                             TensorDataset, random_split)

torch = pytest.importorskip("torch")
tud = torch.utils.data


def test_kiln_data_and_kiln_utils_data_are_one_implementation() -> None:
    import kiln.data
    import kiln.utils.data.dataloader as dl

    assert kiln.data.DataLoader is kiln.utils.data.DataLoader is dl.DataLoader
    assert kiln.data.TensorDataset is kiln.utils.data.TensorDataset
    assert dl.default_collate is kiln.utils.data.default_collate


def test_tensor_dataset_scalar_columns_give_0d_items_and_labels_collate_to_1d() -> None:
    x, y = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32), np.arange(6) % 3
    ours = TensorDataset(kiln.tensor(x), kiln.tensor(y))
    theirs = tud.TensorDataset(torch.tensor(x), torch.tensor(y))
    for i in (0, 5, -1, np.int64(2), kiln.tensor(3)):
        (kx, ky), (tx, ty) = ours[i], theirs[int(i)]
        assert tuple(kx.shape) == tuple(tx.shape) == (3,)
        assert tuple(ky.shape) == tuple(ty.shape) == ()
        assert ky.item() == ty.item()
    xb, yb = next(iter(DataLoader(ours, batch_size=4, collate_fn=kiln.utils.data.default_collate)))
    assert tuple(yb.shape) == (4,)
    loss = F.cross_entropy(kiln.zeros(4, 3), yb)  # (B,) labels: what cross_entropy expects
    np.testing.assert_allclose(loss.item(), np.log(3.0), rtol=1e-6)


def test_tensor_dataset_items_do_not_alias_the_storage() -> None:
    ds = TensorDataset(kiln.zeros(3, 2))
    (row,) = ds[0]
    row.add_(1.0)
    assert ds[0][0].tolist() == [0.0, 0.0]
    assert tuple(ds.tensors[0].shape) == (3, 2)


def test_subset_matches_torch() -> None:
    base = list(range(100, 110))
    ours, theirs = Subset(base, [3, 1, 7]), tud.Subset(base, [3, 1, 7])
    assert [ours[i] for i in range(3)] == [theirs[i] for i in range(3)] and len(ours) == 3
    assert ours.__getitems__([0, 2]) == [103, 107]


def test_subset_of_a_tensor_dataset_keeps_the_collated_fast_path() -> None:
    ds = TensorDataset(kiln.arange(10, dtype=kiln.float32), kiln.arange(10))
    sub = Subset(ds, [9, 0, 4])
    x, y = next(iter(DataLoader(sub, batch_size=3)))
    assert x.tolist() == [9.0, 0.0, 4.0] and y.tolist() == [9, 0, 4]
    assert not hasattr(Subset([1, 2], [0]), "fetch_batch")


def test_concat_dataset_matches_torch() -> None:
    parts = [list(range(3)), list(range(10, 15)), list(range(20, 21))]
    ours, theirs = ConcatDataset(parts), tud.ConcatDataset(parts)
    assert len(ours) == len(theirs) == 9 and ours.cumulative_sizes == theirs.cumulative_sizes
    assert [ours[i] for i in range(-9, 9)] == [theirs[i] for i in range(-9, 9)]
    with pytest.raises(IndexError, match="out of range"):
        ours[9]
    both = TensorDataset(kiln.zeros(2)) + TensorDataset(kiln.ones(3))
    assert isinstance(both, ConcatDataset) and len(both) == 5 and both[4][0].item() == 1.0


@pytest.mark.parametrize("n, lengths", [(10, [0.33, 0.33, 0.34]), (7, [0.5, 0.5]), (10, [3, 7]),
                                        (5, [1.0]), (103, [0.8, 0.1, 0.1])])
def test_random_split_lengths_match_torch(n: int, lengths: list) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = random_split(range(n), lengths, generator=kiln.Generator(0))
        theirs = tud.random_split(range(n), lengths, generator=torch.Generator().manual_seed(0))
    assert [len(s) for s in ours] == [len(s) for s in theirs]
    seen = sorted(i for s in ours for i in (s[j] for j in range(len(s))))
    assert seen == list(range(n))  # disjoint, covering


def test_random_split_is_reproducible_and_random() -> None:
    a = random_split(range(20), [10, 10], generator=kiln.Generator(1))
    b = random_split(range(20), [10, 10], generator=kiln.Generator(1))
    assert a[0].indices == b[0].indices and a[0].indices != list(range(10))


def test_random_split_warns_about_an_empty_split() -> None:
    with pytest.warns(UserWarning) as record:
        splits = random_split(range(2), [0.9, 0.05, 0.05], generator=kiln.Generator(0))
    assert [len(s) for s in splits] == [2, 0, 0]
    assert [str(w.message).split(";")[0] for w in record] == [
        "random_split: length of split at index 1 is 0", "random_split: length of split at index 2 is 0"]


@pytest.mark.parametrize("lengths, exc, message", [
    ([3, 3], ValueError, "sum to 6, but the dataset has 10"),
    ([0.5, 0.6], ValueError, "fractions summing to 1"),
    ([-1, 11], ValueError, "non-negative"),
    ((x for x in [5, 5]), TypeError, "list or tuple"),
])
def test_random_split_bad_lengths(lengths, exc, message) -> None:
    with pytest.raises(exc, match=message):
        random_split(range(10), lengths)


class Stream(IterableDataset):
    def __init__(self, n: int):
        self.n = n

    def __iter__(self):
        return iter(range(self.n))


def test_iterable_dataset_batches_like_torch() -> None:
    class TorchStream(tud.IterableDataset):
        def __iter__(self):
            return iter(range(7))

    for kwargs in (dict(batch_size=3), dict(batch_size=3, drop_last=True), dict(batch_size=None)):
        ours = [np.asarray(b).tolist() if isinstance(b, int) else b.tolist() for b in DataLoader(Stream(7), **kwargs)]
        theirs = [b if isinstance(b, int) else b.tolist() for b in tud.DataLoader(TorchStream(), **kwargs)]
        assert ours == theirs, kwargs


def test_chain_dataset_and_iterable_rules() -> None:
    assert list(ChainDataset([Stream(2), Stream(3)])) == [0, 1, 0, 1, 2]
    assert list(Stream(2) + Stream(1)) == [0, 1, 0]
    with pytest.raises(ValueError, match="shuffle"):
        DataLoader(Stream(3), shuffle=True)
    with pytest.raises(TypeError, match="ChainDataset"):
        ConcatDataset([Stream(3)])
    with pytest.raises(TypeError):
        len(DataLoader(Stream(3)))  # no __len__: as in PyTorch


def test_dataset_base_class_says_what_to_override() -> None:
    with pytest.raises(NotImplementedError, match="__getitem__"):
        Dataset()[0]
    with pytest.raises(NotImplementedError, match="__iter__"):
        iter(IterableDataset())
