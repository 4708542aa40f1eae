"""Samplers: which dataset indices a DataLoader visits, in what order, and how they are grouped."""
from __future__ import annotations

from typing import Any, Generic, Iterable, Iterator, Sequence, Sized, TypeVar

import numpy as np

from ...random import Generator, default_generator

T_co = TypeVar("T_co", covariant=True)

DRAW_CHUNK = 8192  # uniforms drawn at a time by samplers with replacement (a multiple of 4, see _uniform_chunks)


def _randperm(n: int, generator: Generator | None) -> list[int]:
    """A permutation of 0..n-1 from `generator`, or from kiln's global stream when it is None."""
    from ...functional.creation import randperm  # noqa: PLC0415 - functional imports the tensor package

    return randperm(n, generator=generator).numpy().tolist()


def _uniform(n: int, generator: Generator | None) -> np.ndarray:
    """n float64 draws in [0, 1) from `generator` (or the global stream)."""
    from ...functional.creation import rand  # noqa: PLC0415

    return rand(n, dtype="float64", generator=generator).numpy()


def _uniform_chunks(n: int, generator: Generator | None) -> Iterator[np.ndarray]:
    """The same n float64 draws as `_uniform(n, generator)`, made lazily, DRAW_CHUNK at a time.

    The n stream positions are reserved up front, so the generator advances exactly as one
    draw of n would (later draws elsewhere cannot interleave), yet only one chunk is ever in
    memory: ``num_samples=10**10`` costs nothing until it is iterated. A chunk size that is a
    multiple of 4 keeps each chunk on the positions the single draw would have used.
    """
    seed, offset = (generator or default_generator).take(n)
    stream = Generator(seed)
    stream._set_state((seed, offset))
    for start in range(0, n, DRAW_CHUNK):
        yield _uniform(min(DRAW_CHUNK, n - start), stream)


def _positive_int(value: Any, name: str, owner: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{owner}: {name} should be a positive integer, but got {name}={value!r}")
    return int(value)


def _check_generator(generator: Any, owner: str) -> None:
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(f"{owner}: generator must be a kiln.Generator, got {type(generator).__name__}; "
                        "make one with kiln.Generator(seed)")


class Sampler(Generic[T_co]):
    """Base class of samplers: `__iter__` yields indices (or lists of them); `__len__` if it can.

    >>> class Evens(kiln.utils.data.Sampler):
    ...     def __init__(self, n): self.n = n
    ...     def __iter__(self): return iter(range(0, self.n, 2))
    ...     def __len__(self): return (self.n + 1) // 2
    """

    def __init__(self, data_source: Sized | None = None) -> None:
        pass

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler[int]):
    """Indices 0, 1, ..., len(data_source) - 1, in order."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """Random indices: a fresh permutation per epoch, or `num_samples` draws with `replacement`.

    The draws come from `generator` if given, else from kiln's global stream (so
    ``kiln.manual_seed`` makes them reproducible). Draws with replacement are made lazily,
    a chunk at a time, so a huge `num_samples` (``int(1e10)``, for "iterate forever") costs
    nothing up front; ``len()`` is still `num_samples`.

    >>> sampler = RandomSampler(ds, generator=kiln.Generator(0))
    """

    def __init__(self, data_source: Sized, replacement: bool = False, num_samples: int | None = None,
                 generator: Generator | None = None) -> None:
        if not isinstance(replacement, bool):
            raise TypeError(f"RandomSampler: replacement should be a boolean value, but got "
                            f"replacement={replacement!r}")
        _check_generator(generator, "RandomSampler")
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        _positive_int(self.num_samples, "num_samples", "RandomSampler")

    @property
    def num_samples(self) -> int:
        """How many indices one epoch yields (the dataset's length unless given)."""
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        if self.replacement:
            for u in _uniform_chunks(self.num_samples, self.generator):
                yield from np.minimum(np.floor(u * n).astype(np.int64), n - 1).tolist()
            return
        for _ in range(self.num_samples // n):
            yield from _randperm(n, self.generator)
        rest = self.num_samples % n
        if rest:
            yield from _randperm(n, self.generator)[:rest]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given indices in a fresh random order each epoch (e.g. a validation split of one dataset).

    >>> val_sampler = SubsetRandomSampler(range(800, 1000))
    """

    def __init__(self, indices: Sequence[int], generator: Generator | None = None) -> None:
        _check_generator(generator, "SubsetRandomSampler")
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        for i in _randperm(len(self.indices), self.generator):
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """`num_samples` indices drawn with probability proportional to `weights` (e.g. to rebalance classes).

    >>> sampler = WeightedRandomSampler([0.1, 0.9, 0.4], num_samples=5, replacement=True)
    """

    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True,
                 generator: Generator | None = None) -> None:
        _positive_int(num_samples, "num_samples", "WeightedRandomSampler")
        if not isinstance(replacement, bool):
            raise ValueError(f"WeightedRandomSampler: replacement should be a boolean value, but got "
                             f"replacement={replacement!r}")
        _check_generator(generator, "WeightedRandomSampler")
        w = np.asarray(weights.numpy() if hasattr(weights, "numpy") else weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"WeightedRandomSampler: weights should be a 1-d sequence, got shape {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
            raise ValueError("WeightedRandomSampler: weights must be finite, non-negative, with a positive sum")
        if not replacement and num_samples > np.count_nonzero(w):
            raise ValueError(f"WeightedRandomSampler: cannot draw {num_samples} samples without replacement "
                             f"from {np.count_nonzero(w)} nonzero weights; lower num_samples or set "
                             "replacement=True")
        self.weights = w
        self.num_samples = int(num_samples)
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        if self.replacement:
            cdf = np.cumsum(self.weights)
            for u in _uniform_chunks(self.num_samples, self.generator):
                picks = np.searchsorted(cdf, u * cdf[-1], side="right")
                yield from np.minimum(picks, len(self.weights) - 1).tolist()
            return
        u = _uniform(len(self.weights), self.generator)
        # without replacement: the num_samples largest keys log(u) / w (exponential-race sampling)
        with np.errstate(divide="ignore"):
            keys = np.where(self.weights > 0, np.log(u) / np.where(self.weights > 0, self.weights, 1.0), -np.inf)
        yield from np.argsort(-keys, kind="stable")[:self.num_samples].tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[list[int]]):
    """Group the indices of `sampler` into lists of `batch_size` (the last one shorter unless `drop_last`).

    >>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
    [[0, 1], [2, 3], [4]]
    """

    def __init__(self, sampler: Sampler[int] | Iterable[int], batch_size: int, drop_last: bool) -> None:
        self.batch_size = _positive_int(batch_size, "batch_size", "BatchSampler")
        if not isinstance(drop_last, bool):
            raise ValueError(f"BatchSampler: drop_last should be a boolean value, but got drop_last={drop_last!r}")
        self.sampler = sampler
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        return n // self.batch_size if self.drop_last else (n + self.batch_size - 1) // self.batch_size
