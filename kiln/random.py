"""Counter-based random numbers: Philox-4x64-10 keyed by a seed, indexed by an offset.

The global generator state is just ``(seed, offset)``. A random op that needs n
32-bit values reads stream positions offset .. offset+n-1 and advances the offset
by n rounded up to a multiple of 4. Because a draw is a pure
function of (seed, offset, n), compiled code can take the state as an input and
reproduce exactly the numbers eager code would have drawn.

Changing or reading a generator's state inside a compiled function (``kiln.manual_seed``,
``kiln.seed``, ``kiln.set_rng_state``, ``kiln.get_rng_state``, ``kiln.initial_seed``, a
Generator's ``manual_seed``/``set_state``/``get_state``/``initial_seed``/``seed``/``offset``)
is reported to the active tracer (`Tracer.on_rng_state`): eager code does it on every call, a
compiled plan would not, so it is a graph break. So is a random op drawing from a Generator
created inside the compiled function (`Tracer.on_new_generator`). A generator created
outside and passed in or closed over is fine: each call takes its next numbers, as eager.
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .trace_state import trace_state
from .sizes import is_symbolic_number

_KEY_MASK = (1 << 64) - 1
_WORDS_PER_BLOCK = 8  # one Philox-4x64 block: four 64-bit words, eight 32-bit values


def philox_bits(xp: Any, seed: int, offset: int, n: int) -> Any:
    """n uint32 values at stream positions offset .. offset+n-1 of the stream for `seed`.

    The stream is NumPy's Philox-4x64-10 bit generator keyed by `seed` (two 64-bit key
    words), its 64-bit outputs read as pairs of 32-bit values (low half first): position p
    is 32-bit word p % 8 of counter block p // 8. NumPy computes it in C, several times faster
    than Philox in NumPy array operations, and its raw output is stable across NumPy versions.
    Other array modules (CuPy) get the same values, computed on the host.
    """
    if n == 0:
        return xp.zeros(0, dtype=xp.uint32)
    block, lane = divmod(int(offset), _WORDS_PER_BLOCK)
    words = (lane + n + _WORDS_PER_BLOCK - 1) // _WORDS_PER_BLOCK * 4
    seed = int(seed)
    before = (block - 1) % (1 << 256)  # NumPy steps its counter before each block it makes
    counter = np.array([(before >> shift) & _KEY_MASK for shift in (0, 64, 128, 192)], np.uint64)
    key = np.array([seed & _KEY_MASK, (seed >> 64) & _KEY_MASK], np.uint64)
    generator = np.random.Philox(counter=counter, key=key)
    bits = generator.random_raw(words).view(np.uint32)[lane:lane + n]
    return bits if xp is np else xp.asarray(bits)


def _report(call: str, generator: "Generator") -> None:
    """Tell the active tracer (if any) that `call` changes or reads `generator`'s state."""
    hook = getattr(trace_state.tracer, "on_rng_state", None)
    if hook is not None:
        hook(call, generator)


class Generator:
    """A random stream: ``(seed, offset)``. `kiln.manual_seed` resets the default one."""

    def __init__(self, seed: int = 0):
        self._seed = int(seed)
        self._offset = 0
        self._lock = threading.Lock()
        hook = getattr(trace_state.tracer, "on_new_generator", None)
        if hook is not None:  # created while tracing: random ops must not draw from it in a plan
            hook(self)

    @property
    def seed(self) -> int:
        _report("reading Generator.seed", self)
        return self._seed

    @seed.setter
    def seed(self, value: int) -> None:
        _report("setting Generator.seed", self)
        with self._lock:
            self._seed = int(value)

    @property
    def offset(self) -> int:
        _report("reading Generator.offset", self)
        return self._offset

    @offset.setter
    def offset(self, value: int) -> None:
        _report("setting Generator.offset", self)
        with self._lock:
            self._offset = int(value)

    def manual_seed(self, seed: int) -> "Generator":
        _report("Generator.manual_seed()", self)
        return self._reseed(seed)

    def _reseed(self, seed: int) -> "Generator":
        with self._lock:
            self._seed = int(seed)
            self._offset = 0
        return self

    def take(self, n: int) -> tuple[int, int]:
        """Reserve n values: returns the (seed, offset) to draw them from, and advances.

        While tracing, n may be a symbolic count (dynamic_dims): its traced value is read
        without specializing (the plan keeps the count symbolic and resolves it per call).
        """
        count = n.value if is_symbolic_number(n) else int(n)
        with self._lock:
            start = self._offset
            self._offset += (count + 3) // 4 * 4
            return self._seed, start

    def get_state(self) -> tuple[int, int]:
        _report("Generator.get_state()", self)
        return self._state()

    def _state(self) -> tuple[int, int]:
        return self._seed, self._offset

    def set_state(self, state: tuple[int, int]) -> None:
        _report("Generator.set_state()", self)
        self._set_state(state)

    def _set_state(self, state: tuple[int, int]) -> None:
        with self._lock:
            self._seed, self._offset = int(state[0]), int(state[1])

    def initial_seed(self) -> int:
        _report("Generator.initial_seed()", self)
        return self._seed


default_generator = Generator(0)


def manual_seed(seed: int) -> Generator:
    """Seed the default generator; the same seed gives the same numbers, eager or compiled.

    Inside a compiled function this is a graph break (eager reseeds on every call, a plan
    would not): seed before calling the compiled function.
    """
    _report("kiln.manual_seed()", default_generator)
    return default_generator._reseed(seed)


def seed() -> int:
    """Seed the default generator from OS entropy and return the seed."""
    _report("kiln.seed()", default_generator)
    s = int(np.random.SeedSequence().entropy) & 0x7FFFFFFFFFFFFFFF
    default_generator._reseed(s)
    return s


def get_rng_state() -> tuple[int, int]:
    """The default generator's (seed, offset)."""
    _report("kiln.get_rng_state()", default_generator)
    return default_generator._state()


def set_rng_state(state: tuple[int, int]) -> None:
    """Restore the default generator's (seed, offset) saved by `get_rng_state`."""
    _report("kiln.set_rng_state()", default_generator)
    default_generator._set_state(state)


def initial_seed() -> int:
    """The seed the default generator was last seeded with."""
    _report("kiln.initial_seed()", default_generator)
    return default_generator._seed
