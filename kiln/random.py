"""Counter-based random numbers: Philox-4x32-10 keyed by a seed, indexed by an offset.

The global generator state is just ``(seed, offset)``. A random op that needs n
32-bit values reads stream positions offset .. offset+n-1 and advances the offset
by n rounded up to a multiple of 4 (one Philox block). Because a draw is a pure
function of (seed, offset, n), compiled code can take the state as an input and
reproduce exactly the numbers eager code would have drawn.
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = np.uint64(0xFFFFFFFF)
_ROUNDS = 10


def philox_bits(xp: Any, seed: int, offset: int, n: int) -> Any:
    """n uint32 values at stream positions offset .. offset+n-1 of the stream for `seed`."""
    if n == 0:
        return xp.zeros(0, dtype=xp.uint32)
    first_block, lane = divmod(int(offset), 4)
    blocks = (lane + n + 3) // 4
    counter = xp.arange(first_block, first_block + blocks, dtype=xp.uint64)
    c0 = counter & _MASK32
    c1 = counter >> np.uint64(32)
    c2 = xp.zeros_like(c0)
    c3 = xp.zeros_like(c0)
    k0 = int(seed) & 0xFFFFFFFF
    k1 = (int(seed) >> 32) & 0xFFFFFFFF
    for _ in range(_ROUNDS):
        p0 = c0 * _M0
        p1 = c2 * _M1
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
        k0 = (k0 + _W0) & 0xFFFFFFFF
        k1 = (k1 + _W1) & 0xFFFFFFFF
    words = xp.stack([c0, c1, c2, c3], axis=1).reshape(-1).astype(xp.uint32)
    return words[lane:lane + n]


class Generator:
    """A random stream: ``(seed, offset)``. `kiln.manual_seed` resets the default one."""

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self.offset = 0
        self._lock = threading.Lock()

    def manual_seed(self, seed: int) -> "Generator":
        with self._lock:
            self.seed = int(seed)
            self.offset = 0
        return self

    def take(self, n: int) -> tuple[int, int]:
        """Reserve n values: returns the (seed, offset) to draw them from, and advances."""
        with self._lock:
            start = self.offset
            self.offset += (int(n) + 3) // 4 * 4
            return self.seed, start

    def get_state(self) -> tuple[int, int]:
        return self.seed, self.offset

    def set_state(self, state: tuple[int, int]) -> None:
        with self._lock:
            self.seed, self.offset = int(state[0]), int(state[1])

    def initial_seed(self) -> int:
        return self.seed


default_generator = Generator(0)


def manual_seed(seed: int) -> Generator:
    """Seed the default generator; the same seed gives the same numbers, eager or compiled."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    """Seed the default generator from OS entropy and return the seed."""
    s = int(np.random.SeedSequence().entropy) & 0x7FFFFFFFFFFFFFFF
    default_generator.manual_seed(s)
    return s


def get_rng_state() -> tuple[int, int]:
    return default_generator.get_state()


def set_rng_state(state: tuple[int, int]) -> None:
    default_generator.set_state(state)


def initial_seed() -> int:
    return default_generator.initial_seed()
