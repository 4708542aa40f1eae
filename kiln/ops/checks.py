"""Runtime checks: identity primitives whose kernels raise on bad data, as eager PyTorch does.

Each check passes its input array through unchanged, after validating its values:
  - `check_index`: indices of embedding / index_select / gather / scatter_add /
    take_along_dim lie in range (IndexError);
  - `check_targets`: class targets of nll_loss / cross_entropy lie in [0, C) or equal
    ignore_index (IndexError);
  - `check_divisor`: an integer divisor of ``//``, ``%`` or ``div(rounding_mode=...)``
    holds no zero (IntegerDivisionByZeroError);
  - `check_probability`: probabilities of bernoulli lie in [0, 1] (ProbabilityError).

The functional op uses the check's output as its index, target or divisor, so in a
compiled graph the check is a node every replay runs, on both backends, raising the
same error as eager (see kiln/functional/checks.py for how eager calls them). Passes
keep a check even when its output goes unused (`is_check`): eager raises there too.
Sizes in the params (``shape``, ``n_classes``) may be symbolic under dynamic_dims; the
plan resolves them per call, so the message names each call's sizes.
"""
from __future__ import annotations

from typing import Any

from ..sizes import concrete
from .primitive import Primitive


class IntegerDivisionByZeroError(ZeroDivisionError, RuntimeError):
    """Integer ``//`` or ``%`` by zero. PyTorch raises ``RuntimeError: ZeroDivisionError`` there;
    this is both a ZeroDivisionError and a RuntimeError, so either ``except`` clause catches it."""


def _plain(d: Any) -> int:
    """A size param as a plain int. While tracing, bind hands the kernel the traced SymInts:
    reading them through `concrete` neither specializes the plan nor records a shape guard."""
    return d if d.__class__ is int else int(concrete(d))


class Check(Primitive):
    """A runtime check: output = input 0 unchanged; the kernel raises when the data is bad."""

    is_view = True  # the output is the input array itself
    is_check = True

    def abstract(self, x, **params):
        return x

    def vjp(self, g, inputs, node, **params):
        # an identity: a float input's gradient passes through (binary_cross_entropy's probabilities);
        # indices, targets and integer divisors never ask for one
        return (g,)


class CheckIndex(Check):
    """Every index lies in ``[0, size)`` (``[-size, size)`` with `allow_negative`).

    `shape` is the indexed tensor's shape and `dim` the indexed dim; ``dim=None`` means the
    rows of an embedding table (dim 0, worded as such in the message).
    """

    name = "check_index"

    def kernel(self, xp, index, *, op, shape, dim, allow_negative=False):
        if index.size:
            lo, hi = int(index.min()), int(index.max())
            size = _plain(shape[0 if dim is None else dim])
            low = -size if allow_negative else 0
            if lo < low or hi >= size:
                raise IndexError(index_message(op, lo if lo < low else hi, shape, dim, low, size, allow_negative))
        return index


def index_message(op: str, bad: int, shape: tuple, dim: int | None, low: int, size: int,
                  allow_negative: bool) -> str:
    shape = tuple(_plain(d) for d in shape)
    if dim is None:
        what = f"an embedding table of {size} rows (weight shape {shape})"
    else:
        what = f"dimension {dim} with size {size} (input shape {shape})"
    valid = f"{low} to {size - 1}" if size else "none: the dimension is empty"
    note = "" if allow_negative or bad >= 0 else " (negative indices are not allowed here)"
    return f"{op}: index {bad} is out of range for {what}; valid indices: {valid}{note}"


class CheckTargets(Check):
    """Every class target other than `ignore_index` lies in ``[0, n_classes)``."""

    name = "check_targets"

    def kernel(self, xp, target, *, op, n_classes, ignore_index):
        if target.size:
            n = _plain(n_classes)
            if int(target.min()) < 0 or int(target.max()) >= n:
                bad = target[(target != ignore_index) & ((target < 0) | (target >= n))]
                if bad.size:
                    raise IndexError(
                        f"{op}: target {int(bad.reshape(-1)[0])} is out of bounds: class indices must lie "
                        f"in [0, {n - 1}] for an input with {n} classes, or equal "
                        f"ignore_index={ignore_index} to be skipped")
        return target


class CheckDivisor(Check):
    """An integer divisor holds no zero (bound only for integer operands and a non-empty dividend)."""

    name = "check_divisor"

    def kernel(self, xp, divisor, *, op):
        if xp.count_nonzero(divisor) != divisor.size:
            raise IntegerDivisionByZeroError(
                f"ZeroDivisionError: {op}: integer division by zero (the {divisor.dtype.name} divisor holds a 0). "
                "Fix: replace the zeros first, e.g. kiln.where(b == 0, 1, b), or divide in floating point "
                "(a.float() // b gives inf or nan there)"
            )
        return divisor


class ProbabilityError(ValueError, RuntimeError):
    """A probability outside [0, 1] (or NaN). PyTorch raises RuntimeError there; this is both a
    ValueError and a RuntimeError, so either ``except`` clause catches it."""


class CheckProbability(Check):
    """Every value is a probability: in ``[0, 1]``, not NaN (kiln.bernoulli, Tensor.bernoulli_)."""

    name = "check_probability"

    def kernel(self, xp, p, *, op, fix=None):
        if p.size and not bool(((p >= 0) & (p <= 1)).all()):
            bad = p[~((p >= 0) & (p <= 1))].reshape(-1)[0]
            raise ProbabilityError(f"{op}: probabilities must lie in [0, 1], got {float(bad)!r}; " + (
                fix or "clamp them first, e.g. p.clamp(0, 1), or pass probabilities rather than logits "
                       "(p = logits.sigmoid())"))
        return p
