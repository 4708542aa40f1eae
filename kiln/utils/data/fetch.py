"""Fetchers: turn one entry of the index stream into a batch (or a sample), the same way in every process."""
from __future__ import annotations

from typing import Any, Callable, Iterator

from .collate import default_collate


class MapFetcher:
    """Fetch from a map-style dataset: a list of indices becomes a collated batch, one index a sample.

    With the default collate function, a dataset with ``fetch_batch`` (TensorDataset, Subset
    of one) hands back the collated batch directly; one with ``__getitems__`` gets the whole
    list of indices at once.
    """

    def __init__(self, dataset: Any, auto_collation: bool, collate_fn: Callable[[Any], Any]):
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.fetch_batch = getattr(dataset, "fetch_batch", None) if collate_fn is default_collate else None
        self.getitems = getattr(dataset, "__getitems__", None)

    def fetch(self, index: Any) -> Any:
        if not self.auto_collation:
            return self.collate_fn(self.dataset[index])
        if self.fetch_batch is not None:
            return self.fetch_batch(index)
        if self.getitems is not None:
            samples = self.getitems(index)
        else:
            samples = [self.dataset[i] for i in index]
        return self.collate_fn(samples)


class IterableFetcher:
    """Fetch from an iterable dataset: the next `batch_size` items (collated), or the next item.

    Raises StopIteration when the stream is done (or only a short batch is left with `drop_last`).
    """

    def __init__(self, dataset: Any, auto_collation: bool, collate_fn: Callable[[Any], Any],
                 batch_size: int | None, drop_last: bool):
        self.iterator: Iterator[Any] = iter(dataset)
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.ended = False

    def fetch(self, index: Any = None) -> Any:
        if self.ended:
            raise StopIteration
        if not self.auto_collation:
            return self.collate_fn(next(self.iterator))
        samples = []
        for _ in range(self.batch_size or 1):
            try:
                samples.append(next(self.iterator))
            except StopIteration:
                self.ended = True
                break
        if not samples or (self.drop_last and len(samples) < (self.batch_size or 1)):
            self.ended = True
            raise StopIteration
        return self.collate_fn(samples)
