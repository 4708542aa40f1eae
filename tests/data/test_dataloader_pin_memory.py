"""DataLoader(pin_memory=True): accepted, changes no batch, and warns as PyTorch does.

kiln has no pinned memory on any device. PyTorch warns at each new iterator when no
accelerator is found (a UserWarning, so Python's default filter shows it once); kiln does
the same, stays silent with an accelerator, and warns that pin_memory_device is deprecated.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
import kiln.utils.data.dataloader as dataloader_module
from kiln.utils.data import DataLoader, TensorDataset

NO_ACCELERATOR = "no accelerator is found"


def _dataset() -> TensorDataset:
    return TensorDataset(kiln.arange(10.0).reshape(5, 2), kiln.arange(5))


def _epoch(loader: DataLoader) -> list[list[np.ndarray]]:
    return [[t.numpy() for t in batch] for batch in loader]


def _messages(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, UserWarning)]


@pytest.fixture
def no_accelerator(monkeypatch):
    monkeypatch.setattr(kiln.accelerator, "is_available", lambda: False)


def test_pinning_changes_no_batch(no_accelerator):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pinned = _epoch(DataLoader(_dataset(), batch_size=2, shuffle=True, seed=3, pin_memory=True))
    plain = _epoch(DataLoader(_dataset(), batch_size=2, shuffle=True, seed=3))
    assert len(pinned) == len(plain) == 3
    for a, b in zip(pinned, plain):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    assert DataLoader(_dataset(), pin_memory=True).pin_memory is True


def test_warns_at_each_new_iterator_without_an_accelerator(no_accelerator):
    """Every pass over the data warns (when every warning is shown); building the loader does not."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        loader = DataLoader(_dataset(), batch_size=2, pin_memory=True)
        assert _messages(record) == []
        _epoch(loader)
        _epoch(loader)
    messages = _messages(record)
    assert len(messages) == 2 and all(NO_ACCELERATOR in m and "pin_memory" in m for m in messages)
    assert "kiln has no pinned memory" in messages[0]


def test_the_default_filter_shows_it_once(no_accelerator):
    """Under Python's default filter the warning shows once, however many epochs and loaders."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("default")
        for _ in range(3):
            _epoch(DataLoader(_dataset(), batch_size=2, pin_memory=True))
    assert len([m for m in _messages(record) if NO_ACCELERATOR in m]) == 1


def test_torch_warns_the_same_way_without_an_accelerator():
    torch = pytest.importorskip("torch")
    if torch.accelerator.is_available():
        pytest.skip("the installed PyTorch has an accelerator, so it pins instead of warning")
    tdata = torch.utils.data
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        loader = tdata.DataLoader(tdata.TensorDataset(torch.arange(10.0).reshape(5, 2)), batch_size=2,
                                  pin_memory=True)
        list(loader)
        list(loader)
    assert len([m for m in _messages(theirs) if NO_ACCELERATOR in m]) == 2


def test_silent_without_pin_memory_or_with_an_accelerator(monkeypatch):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _epoch(DataLoader(_dataset(), batch_size=2))
        monkeypatch.setattr(kiln.accelerator, "is_available", lambda: True)
        _epoch(DataLoader(_dataset(), batch_size=2, pin_memory=True))
    assert _messages(record) == []


def test_pin_memory_device_is_deprecated_as_in_pytorch(monkeypatch):
    monkeypatch.setattr(kiln.accelerator, "is_available", lambda: True)
    with pytest.warns(UserWarning, match="pin_memory_device is deprecated.*'cuda'"):
        _epoch(DataLoader(_dataset(), batch_size=2, pin_memory=True, pin_memory_device="cuda"))


def test_worker_loaders_warn_in_the_main_process(no_accelerator, monkeypatch):
    """With num_workers > 0 the warning comes when the iterator is made (no worker is started here)."""
    made = []
    monkeypatch.setattr(dataloader_module, "MultiProcessIterator", lambda loader: made.append(loader) or iter(()))
    loader = DataLoader(_dataset(), batch_size=2, num_workers=2, pin_memory=True)
    with pytest.warns(UserWarning, match=NO_ACCELERATOR):
        list(loader)
    assert made == [loader]


def test_the_docstring_says_pinning_does_nothing():
    doc = DataLoader.__doc__
    assert "pin_memory=True" in doc and "no pinned" in doc and "accelerator" in doc
