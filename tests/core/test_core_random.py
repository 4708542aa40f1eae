"""The counter-based generator: Philox4x64-10 known answers, seeding, offsets, statistics."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.random import philox_bits

M0, M1 = 0xD2E7470EE14C6C93, 0xCA5A826395121157
W0, W1 = 0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B
MASK = (1 << 64) - 1


def philox4x64_10(ctr: tuple[int, int, int, int], key: tuple[int, int]) -> tuple[int, ...]:
    """Reference Philox4x64-10 in plain Python integers (Salmon et al., Random123)."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> 64) ^ c1 ^ k0) & MASK, p1 & MASK, ((p0 >> 64) ^ c3 ^ k1) & MASK, p0 & MASK
    return c0, c1, c2, c3


def _halves(words: tuple[int, ...]) -> list[int]:
    """64-bit words as the stream reads them: each as its low, then its high 32 bits."""
    return [half for w in words for half in (w & 0xFFFFFFFF, w >> 32)]


# The Random123 known-answer vectors for philox4x64_10 (kat_vectors).
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x16554D9ECA36314C, 0xDB20FE9D672D0FDC, 0xD7E772CEE186176B, 0x7E68B68AEC7BA23B)),
    ((MASK, MASK, MASK, MASK), (MASK, MASK),
     (0x87B092C3013FE90B, 0x438C3C67BE8D0224, 0x9CC7D7C69CD777B6, 0xA09CAEBF594F0BA0)),
]


@pytest.mark.parametrize("ctr,key,expected", KAT)
def test_reference_philox_matches_random123(ctr: tuple, key: tuple, expected: tuple) -> None:
    assert philox4x64_10(ctr, key) == expected


def test_philox_bits_known_answer() -> None:
    """Counter 0, key 0: the first Random123 vector, as the stream of seed 0 at offset 0."""
    assert [int(v) for v in philox_bits(np, 0, 0, 8)] == _halves(KAT[0][2])


@pytest.mark.parametrize("seed", [0, 1, 42, 0xA4093822, 0x299F31D0_A4093822, 2**63 - 1, 2**64 + 5])
@pytest.mark.parametrize("block", [0, 1, 7, 2**32 - 1, 2**32, 2**40 + 3, 2**64 - 1])
def test_philox_bits_matches_reference(seed: int, block: int) -> None:
    """Block b of the stream is Philox(counter=(b_lo, b_hi, 0, 0), key=(seed_lo, seed_hi)), 8 values."""
    got = [int(v) for v in philox_bits(np, seed, 8 * block, 16)]
    key = (seed & MASK, (seed >> 64) & MASK)
    want = _halves(philox4x64_10((block & MASK, block >> 64, 0, 0), key))
    nb = block + 1
    want += _halves(philox4x64_10((nb & MASK, nb >> 64, 0, 0), key))
    assert got == want


def test_philox_bits_offsets_within_a_block() -> None:
    full = philox_bits(np, 5, 0, 16)
    for start in range(8):
        for n in (1, 3, 5):
            np.testing.assert_array_equal(philox_bits(np, 5, start, n), full[start:start + n])
    assert philox_bits(np, 5, 3, 0).shape == (0,)
    assert full.dtype == np.uint32


def test_manual_seed_reproducibility() -> None:
    kiln.manual_seed(123)
    a = [kiln.randn(3, 4), kiln.rand(5), kiln.randint(0, 10, (6,))]
    kiln.manual_seed(123)
    b = [kiln.randn(3, 4), kiln.rand(5), kiln.randint(0, 10, (6,))]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    kiln.manual_seed(124)
    assert not np.array_equal(kiln.randn(3, 4).numpy(), a[0].numpy())


def test_offset_advances_and_calls_differ() -> None:
    kiln.manual_seed(7)
    assert kiln.get_rng_state() == (7, 0)
    a = kiln.rand(5)
    seed, off = kiln.get_rng_state()
    assert seed == 7 and off == 8  # 5 values, rounded up to a multiple of 4
    b = kiln.rand(5)
    assert kiln.get_rng_state() == (7, 16)
    assert not np.array_equal(a.numpy(), b.numpy())
    kiln.randn(3)  # Box-Muller uses pairs: 4 values
    assert kiln.get_rng_state() == (7, 20)
    assert kiln.initial_seed() == 7


def test_rng_state_roundtrip() -> None:
    kiln.manual_seed(3)
    kiln.rand(10)
    state = kiln.get_rng_state()
    a = kiln.randn(4)
    kiln.set_rng_state(state)
    np.testing.assert_array_equal(kiln.randn(4).numpy(), a.numpy())


def test_draws_are_the_stream_values() -> None:
    """rand() is a pure function of (seed, offset): 24 high bits of each 32-bit value."""
    kiln.manual_seed(11)
    kiln.rand(3)  # advances to offset 4
    u = kiln.rand(6, dtype=kiln.float64).numpy()
    bits = philox_bits(np, 11, 4, 6)
    np.testing.assert_array_equal(u, (bits >> 8).astype(np.float64) / 2**24)


def test_generator_objects_are_independent() -> None:
    g1, g2 = kiln.Generator(5), kiln.Generator(5)
    a = kiln.rand(4, generator=g1)
    kiln.rand(100)  # the default stream does not disturb g2
    b = kiln.rand(4, generator=g2)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert g1.get_state() == (5, 4)


def test_uniform_statistics() -> None:
    kiln.manual_seed(0)
    u = kiln.rand(100_000, dtype=kiln.float64).numpy()
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    hist, _ = np.histogram(u, bins=10, range=(0, 1))
    assert np.all(np.abs(hist / 10_000 - 1) < 0.05)


def test_normal_statistics() -> None:
    kiln.manual_seed(1)
    z = kiln.randn(200_000, dtype=kiln.float64).numpy()
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert abs(np.mean(z**3)) < 0.03 and abs(np.mean(z**4) - 3) < 0.06  # skew 0, kurtosis 3
    assert abs(np.mean(np.abs(z) < 1.0) - 0.6827) < 0.005
    assert abs(np.corrcoef(z[:-1], z[1:])[0, 1]) < 0.01  # the Box-Muller pairs are uncorrelated


def test_randint_range_and_uniformity() -> None:
    kiln.manual_seed(2)
    r = kiln.randint(3, 8, (50_000,))
    assert r.dtype is kiln.int64
    v = r.numpy()
    assert v.min() == 3 and v.max() == 7
    counts = np.bincount(v - 3, minlength=5) / len(v)
    assert np.all(np.abs(counts - 0.2) < 0.01)
    assert kiln.randint(5, size=(2, 3)).shape == (2, 3)
    assert kiln.randint(0, 4, (3,), dtype=kiln.int32).dtype is kiln.int32


def test_normal_inplace_and_functional() -> None:
    kiln.manual_seed(4)
    w = kiln.empty(50_000, dtype=kiln.float64)
    assert w.normal_(2.0, 0.5) is w
    v = w.numpy()
    assert abs(v.mean() - 2.0) < 0.01 and abs(v.std() - 0.5) < 0.01
    u = kiln.empty(20_000).uniform_(-1.0, 3.0).numpy()
    assert u.min() >= -1.0 and u.max() < 3.0 and abs(u.mean() - 1.0) < 0.05
    n = kiln.normal(1.0, 2.0, (4, 5))
    assert n.shape == (4, 5) and n.dtype is kiln.float32
    p = kiln.zeros(3, requires_grad=True)
    with kiln.no_grad():  # how init functions fill parameters
        p.normal_()
    assert p.requires_grad and p.is_leaf and np.all(p.detach().numpy() != 0)
    with pytest.raises(RuntimeError, match="leaf"):
        p.normal_()


def test_random_shapes_and_dtypes() -> None:
    assert kiln.randn(2, 3).shape == (2, 3) and kiln.randn(2, 3).dtype is kiln.float32
    assert kiln.randn((4,)).shape == (4,)
    assert kiln.rand(2, dtype=kiln.float64).dtype is kiln.float64
    assert kiln.randn(0).shape == (0,)
    assert kiln.randn(()).shape == ()
    assert kiln.rand(3, requires_grad=True).requires_grad
    assert kiln.randn_like(kiln.ones(2, 2, dtype=kiln.float64)).dtype is kiln.float64
    assert kiln.rand_like(kiln.ones(2, 5)).shape == (2, 5)
    assert sorted(kiln.randperm(6).tolist()) == list(range(6))


def test_dropout_statistics_and_seeding() -> None:
    x = kiln.ones(200, 100)
    kiln.manual_seed(9)
    y = kiln.dropout(x, 0.3).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.01
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)
    assert abs(y.mean() - 1.0) < 0.02  # the expectation is preserved
    kiln.manual_seed(9)
    np.testing.assert_array_equal(kiln.dropout(x, 0.3).numpy(), y)
    assert not np.array_equal(kiln.dropout(x, 0.3).numpy(), y)  # the next call draws a new mask
    assert np.all(kiln.dropout(x, 1.0).numpy() == 0)
    with pytest.raises(ValueError):
        kiln.dropout(x, 1.5)


def test_dropout_identity_and_grad_mask() -> None:
    x = kiln.randn(4, 5, requires_grad=True)
    assert kiln.dropout(x, 0.0) is x or np.array_equal(kiln.dropout(x, 0.0).detach().numpy(), x.detach().numpy())
    assert np.array_equal(kiln.dropout(x, 0.5, training=False).detach().numpy(), x.detach().numpy())
    y = kiln.dropout(x, 0.5)
    y.sum().backward()
    mask = y.detach().numpy() != 0
    np.testing.assert_allclose(x.grad.numpy(), mask * 2.0)
