"""The multinomial primitive: category indices drawn from rows of weights.

Like `uniform`, it takes the generator state as a runtime input ``key = [seed, offset]``,
so a compiled plan draws the same numbers eager code would and fresh ones on every call.

With replacement, each sample inverts the row's cumulative weights at a uniform draw.
Without replacement, each category gets an exponential "arrival time" E / p (E ~ Exp(1),
from one uniform draw per category) and the first `num_samples` arrivals win: this gives
exactly the distribution of drawing one category at a time and removing it.
"""
from __future__ import annotations

from ..dtypes import int64
from .primitive import AbstractValue, Primitive, ShapeError
from .random_ops import _uniform


def multinomial_count(rows: int, categories: int, num_samples: int, replacement: bool) -> int:
    """How many 32-bit values `multinomial` consumes."""
    return rows * (num_samples if replacement else categories)


class MultinomialWeightsError(ValueError):
    """The weights of a multinomial draw are not a valid distribution (negative, NaN/inf, all zero)."""


class Multinomial(Primitive):
    """`num_samples` category indices per row of non-negative weights `probs` (1-D or 2-D)."""

    name = "multinomial"
    is_random = True

    def abstract(self, probs, key, *, num_samples, replacement):
        if len(probs.shape) not in (1, 2):
            raise ShapeError(f"multinomial: probs must be 1-D or 2-D, got shape {tuple(probs.shape)}")
        if not replacement and num_samples > probs.shape[-1]:
            raise ShapeError(f"multinomial: cannot draw {num_samples} samples without replacement from "
                             f"{probs.shape[-1]} categories")
        return AbstractValue(tuple(probs.shape[:-1]) + (num_samples,), int64)

    def kernel(self, xp, probs, key, *, num_samples, replacement):
        p = probs.reshape(-1, probs.shape[-1]).astype(xp.float64)
        rows, n = p.shape
        _check_weights(xp, p, num_samples, replacement)
        u = _uniform(xp, key, multinomial_count(rows, n, num_samples, replacement))
        if replacement:
            cdf = xp.cumsum(p, axis=1)
            draws = u.reshape(rows, num_samples) * cdf[:, -1:]  # in [0, total): never past the last weight
            out = xp.stack([xp.searchsorted(cdf[r], draws[r], side="right") for r in range(rows)]) \
                if rows else xp.zeros((0, num_samples), dtype=xp.int64)
            out = xp.minimum(out, n - 1)
        else:
            with _quiet(xp):
                arrival = -xp.log1p(-u.reshape(rows, n)) / p  # weight 0: inf, never among the winners
            out = xp.argsort(arrival, axis=1, kind="stable")[:, :num_samples]
        return out.astype(xp.int64).reshape(tuple(probs.shape[:-1]) + (num_samples,))


def _quiet(xp):
    """Division by a zero weight gives inf on purpose: silence NumPy's warning (CuPy has none)."""
    errstate = getattr(xp, "errstate", None)
    if errstate is None:
        import contextlib  # noqa: PLC0415

        return contextlib.nullcontext()
    return errstate(divide="ignore")


def _check_weights(xp, p, num_samples: int, replacement: bool) -> None:
    if p.size and not bool(xp.all(xp.isfinite(p) & (p >= 0))):
        raise MultinomialWeightsError("multinomial: the probability tensor contains inf, NaN or a negative "
                                      "element; expected finite weights >= 0 (e.g. softmax outputs)")
    positive = (p > 0).sum(axis=1)
    if p.size and bool(xp.any(positive == 0)):
        raise MultinomialWeightsError("multinomial: a row of the probability tensor sums to 0; every row needs "
                                      "at least one positive weight")
    if not replacement and p.size and bool(xp.any(positive < num_samples)):
        fewest = int(positive.min())
        raise MultinomialWeightsError(f"multinomial: cannot draw {num_samples} samples without replacement from a "
                                      f"row with only {fewest} categories of positive weight; draw fewer, or pass "
                                      "replacement=True")
