"""A median timer: warm up, then time `repeat` samples of `number` calls each."""
from __future__ import annotations

import gc
import math
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

Loop = Callable[[int], None]
"""A benchmark body: ``loop(n)`` runs the measured operation n times."""


@dataclass(frozen=True)
class Timing:
    """Seconds per call, one value per timed sample; summarized by the median."""

    samples: tuple[float, ...]
    number: int  # calls per sample

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    @property
    def iqr(self) -> float:
        """Interquartile range: the spread of the middle half of the samples."""
        if len(self.samples) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.samples, n=4)
        return q3 - q1

    def as_dict(self, scale: float = 1.0) -> dict:
        """The summary in units of `scale` seconds (e.g. 1e-6 for microseconds)."""
        return {"median": self.median / scale, "min": self.min / scale, "max": self.max / scale,
                "iqr": self.iqr / scale, "samples": len(self.samples), "calls_per_sample": self.number}


def repeat_calls(fn: Callable[[], object]) -> Loop:
    """Turn a no-argument callable into a `Loop`."""

    def loop(n: int) -> None:
        for _ in range(n):
            fn()

    return loop


MIN_SAMPLE_S = 0.01
MAX_CALLS_PER_SAMPLE = 10_000


def calls_per_sample(loop: Loop, min_sample_s: float = MIN_SAMPLE_S) -> int:
    """How many calls of `loop` make a sample of at least `min_sample_s` (from one timed call,
    then from the time of the calls so far while they are under a tenth of it)."""
    calls, elapsed = 1, 0.0
    while True:
        start = time.perf_counter()
        loop(calls)
        elapsed = time.perf_counter() - start
        if elapsed * 10 >= min_sample_s or calls >= MAX_CALLS_PER_SAMPLE:
            break
        calls *= 10
    per_call = max(elapsed / calls, 1e-9)
    return max(1, min(MAX_CALLS_PER_SAMPLE, math.ceil(min_sample_s / per_call)))


def settle_compiled_code() -> None:
    """Wait for kiln's background builds (`kiln.jit.wait_for_builds`) where this process has imported kiln:
    a steady-state timing is of the generated code, not of the Python that runs while it compiles."""
    kiln = sys.modules.get("kiln")
    if kiln is not None:
        kiln.jit.wait_for_builds()


def measure(loop: Loop, *, number: int | None = 1, repeat: int = 20, warmup: int = 3,
            min_sample_s: float = MIN_SAMPLE_S) -> Timing:
    """Time `loop(number)` `repeat` times after `warmup` untimed samples (and kiln's background builds).

    The garbage collector is paused while a sample runs (as `timeit` does), so
    a collection triggered by one library's allocations is not billed to a sample.

    `number=None` picks the calls per sample after the warmup so that a sample lasts at least
    `min_sample_s` (as `timeit.autorange` does): one call of a millisecond timed alone, right after
    the collection that starts each sample, measures cold caches and BLAS threads woken from sleep,
    which a training loop calling its step back to back never sees.

    >>> t = measure(repeat_calls(lambda: x + y), number=1000, repeat=15)
    >>> t.median  # seconds per call
    """
    if (number is not None and number < 1) or repeat < 1 or warmup < 0:
        raise ValueError(f"measure: need number >= 1 (or None), repeat >= 1, warmup >= 0; got "
                         f"number={number}, repeat={repeat}, warmup={warmup}")
    for _ in range(warmup):
        loop(number or 1)
    settle_compiled_code()
    if number is None:
        if warmup:  # (the first call after the builds loads their libraries: calibrated on, 1 call per sample)
            loop(1)
        number = calls_per_sample(loop, min_sample_s)
    samples = []
    gc_was_enabled = gc.isenabled()
    try:
        for _ in range(repeat):
            gc.collect()
            gc.disable()
            start = time.perf_counter()
            loop(number)
            samples.append((time.perf_counter() - start) / number)
            if gc_was_enabled:
                gc.enable()
    finally:
        if gc_was_enabled:
            gc.enable()
    return Timing(tuple(samples), number)
