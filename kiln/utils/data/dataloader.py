"""`DataLoader`: batches of a dataset, in this process or in worker processes, PyTorch-style."""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Iterable, Iterator

from ... import accelerator as _accelerator
from ...random import Generator
from .collate import default_collate, default_convert
from .dataset import Dataset, IterableDataset, TensorDataset
from .fetch import IterableFetcher, MapFetcher
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler
from .worker import get_worker_info
from .worker_pool import MultiProcessIterator, draw_seed, start_method_context

__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info"]


class _InfiniteNone(Sampler[None]):
    """The index stream of an IterableDataset: the dataset decides what comes next."""

    def __iter__(self) -> Iterator[None]:
        while True:
            yield None


class DataLoader:
    """Iterate over a dataset in batches of kiln tensors, with PyTorch's arguments.

    `dataset` is a map-style `Dataset` (``__len__`` and ``__getitem__``), an
    `IterableDataset`, or (a kiln shortcut) a tuple of tensors/arrays, wrapped in a
    `TensorDataset`. Order: ``shuffle=True`` draws a fresh permutation each epoch from
    `generator` (or a private ``Generator(seed)``, or kiln's global stream); or give a
    `sampler`, or a `batch_sampler` that yields whole lists of indices.
    ``batch_size=None`` turns batching off (samples come one by one through `collate_fn`,
    by default `default_convert`).

    ``num_workers > 0`` loads batches in that many worker processes (the platform's
    start method unless `multiprocessing_context` says "spawn", "fork" or "forkserver";
    under spawn the dataset and functions must be picklable; "fork", Linux's default, copies
    this process, so a process that runs threads, e.g. with JAX imported, should pass
    "forkserver" or "spawn"). Batches still arrive in
    order; an error in a worker is raised here naming the worker. Workers stop at the
    end of each epoch, or live on with ``persistent_workers=True``. Each worker seeds
    kiln, `random` and NumPy from a base seed plus its id; `worker_init_fn(worker_id)`
    runs first in each worker.

    ``pin_memory=True`` is accepted, but kiln has no pinned (page-locked) memory on any of its
    devices, so batches come out as they would without it. Like PyTorch, each new pass over
    the data warns (a UserWarning, which Python's default filter shows once) when no
    accelerator is found; with one, the flag is silently ignored. A non-empty
    `pin_memory_device` warns that it is deprecated, as in PyTorch.

    >>> loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, num_workers=2)
    >>> for xb, yb in loader:
    ...     loss = F.cross_entropy(model(xb), yb)
    """

    def __init__(self, dataset: Dataset | tuple, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler: Sampler | Iterable | None = None, batch_sampler: Sampler | Iterable | None = None,
                 num_workers: int = 0, collate_fn: Callable[[Any], Any] | None = None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn: Callable[[int], None] | None = None,
                 multiprocessing_context: Any = None, generator: Generator | None = None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True, seed: int | None = None):
        if isinstance(dataset, tuple):
            dataset = TensorDataset(*dataset)
        is_iterable = isinstance(dataset, IterableDataset)
        if not is_iterable and (not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__")):
            raise TypeError(f"DataLoader expects a Dataset (with __len__ and __getitem__), an IterableDataset or "
                            f"a tuple of tensors, got {type(dataset).__name__}")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise ValueError(f"DataLoader: batch_size must be a positive int (or None for no batching), "
                             f"got {batch_size!r}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"DataLoader: num_workers must be a non-negative int, got {num_workers!r}; "
                             "use 0 to load in the main process")
        if not timeout >= 0:
            raise ValueError(f"DataLoader: timeout must be non-negative, got {timeout!r}")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("DataLoader: prefetch_factor only applies with worker processes; set num_workers > 0 "
                             "or leave prefetch_factor unset")
        if prefetch_factor is not None and (isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, int)
                                            or prefetch_factor < 1):
            raise ValueError(f"DataLoader: prefetch_factor must be a positive int, got {prefetch_factor!r}")
        if persistent_workers and num_workers == 0:
            raise ValueError("DataLoader: persistent_workers=True needs num_workers > 0 (there are no workers to "
                             "keep)")
        if seed is not None and generator is not None:
            raise ValueError("DataLoader: pass either seed= or generator=, not both")
        if generator is not None and not isinstance(generator, Generator):
            raise TypeError(f"DataLoader: generator must be a kiln.Generator, got {type(generator).__name__}; "
                            "make one with kiln.Generator(seed)")
        if is_iterable:
            if shuffle not in (None, False):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                                 f"shuffle={shuffle}; an iterable dataset decides its own order")
            if sampler is not None or batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected no sampler or batch_sampler (an "
                                 "iterable dataset decides its own order)")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle; shuffle inside the "
                             "sampler (e.g. RandomSampler) instead")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("DataLoader: batch_sampler option is mutually exclusive with batch_size, shuffle, "
                                 "sampler, and drop_last; the batch sampler already decides all of them")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("DataLoader: batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if multiprocessing_context is not None and num_workers == 0:
            raise ValueError("DataLoader: multiprocessing_context applies only with num_workers > 0")
        start_method_context(multiprocessing_context)  # validate now, not at the first epoch

        if generator is None and seed is not None:
            generator = Generator(seed)
        if sampler is None and not is_iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not is_iterable:
            batch_sampler = BatchSampler(sampler, batch_size, bool(drop_last))

        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.pin_memory = bool(pin_memory)
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor if prefetch_factor is not None or num_workers == 0 else 2
        self.persistent_workers = bool(persistent_workers)
        self.in_order = in_order
        self._is_iterable = is_iterable
        self._auto_collation = batch_sampler is not None or (is_iterable and batch_size is not None)
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self._iterator: MultiProcessIterator | None = None

    @property
    def shuffle(self) -> bool:
        """Whether the sampler shuffles (a RandomSampler)."""
        return isinstance(self.sampler, RandomSampler)

    @property
    def _index_sampler(self) -> Iterable[Any]:
        if self._is_iterable:
            return _InfiniteNone()
        return self.batch_sampler if self._auto_collation else self.sampler

    def _mp_context(self) -> Any:
        return start_method_context(self.multiprocessing_context)

    def __len__(self) -> int:
        """The number of batches per epoch (for an IterableDataset, from the dataset's own length)."""
        if self._is_iterable:
            n = len(self.dataset)  # raises TypeError when the stream has no length, as in PyTorch
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        return len(self._index_sampler)  # type: ignore[arg-type]

    def _warn_about_pinning(self) -> None:
        """PyTorch's warnings for a new iterator of a loader with ``pin_memory=True``."""
        if not self.pin_memory:
            return
        if self.pin_memory_device:
            warnings.warn(f"DataLoader: pin_memory_device is deprecated (PyTorch uses the current accelerator); "
                          f"ignoring pin_memory_device={self.pin_memory_device!r}", UserWarning, stacklevel=1)
        if not _accelerator.is_available():
            warnings.warn("DataLoader: 'pin_memory' argument is set as true but no accelerator is found, then device "
                          "pinned memory won't be used (kiln has no pinned memory: batches stay in ordinary "
                          "memory; drop pin_memory=True to silence this)", UserWarning, stacklevel=1)

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers == 0:
            self._warn_about_pinning()
            return _SingleProcessIterator(self)
        if not self.persistent_workers:
            self._warn_about_pinning()
            return MultiProcessIterator(self)
        if self._iterator is None or self._iterator._pool.closed:
            self._warn_about_pinning()
            self._iterator = MultiProcessIterator(self)
        else:
            self._iterator.reset(self)
        return self._iterator

    def __repr__(self) -> str:
        size = len(self.dataset) if hasattr(self.dataset, "__len__") else "?"
        return (f"DataLoader({type(self.dataset).__name__} of {size}, batch_size={self.batch_size}, "
                f"shuffle={self.shuffle}, drop_last={self.drop_last}, num_workers={self.num_workers})")


class _SingleProcessIterator:
    """One pass over a DataLoader, fetching in this process."""

    def __init__(self, loader: DataLoader):
        # Workers take their base seed from the generator before the sampler draws; the same
        # draw here keeps the shuffle order independent of num_workers.
        draw_seed(loader.generator)
        self._sampler_iter = iter(loader._index_sampler)
        if loader._is_iterable:
            self._fetcher: Any = IterableFetcher(loader.dataset, loader._auto_collation, loader.collate_fn,
                                                 loader.batch_size, loader.drop_last)
        else:
            self._fetcher = MapFetcher(loader.dataset, loader._auto_collation, loader.collate_fn)

    def __iter__(self) -> _SingleProcessIterator:
        return self

    def __next__(self) -> Any:
        return self._fetcher.fetch(next(self._sampler_iter))
