"""A line search satisfying the strong Wolfe conditions, for LBFGS.

Along a descent direction ``d`` from ``x``, find a step ``t`` with

- sufficient decrease: ``f(x + t d) <= f(x) + c1 t g.d``;
- curvature: ``|g(x + t d).d| <= c2 |g.d|``.

Two phases: first grow the step until an interval is known to hold an acceptable one (a
bracket), then shrink that interval ("zoom"). Each new trial step is the minimizer of the cubic that matches the
values and slopes at two known steps, clamped to a safe range; in the zoom phase a trial
too close to an end of the interval is pushed a tenth of its width inside, unless the
previous trial already made enough progress.

Everything here runs on NumPy vectors (``x``, ``d``, gradients) and Python floats.
"""
from __future__ import annotations

import math
from typing import Any, Callable

Evaluate = Callable[[float], tuple[float, Any]]  # step -> (loss, flat gradient) at x + step * d


def cubic_minimizer(a: float, fa: float, ga: float, b: float, fb: float, gb: float,
                    bounds: tuple[float, float] | None = None) -> float:
    """The minimizer of the cubic through ``(a, fa)`` and ``(b, fb)`` with slopes `ga` and `gb`.

    The result is clamped to `bounds` (default: the interval between `a` and `b`); when the
    cubic has no minimizer the middle of the bounds is returned.

    >>> cubic_minimizer(0.0, 1.0, -1.0, 2.0, 1.0, 1.0)   # the parabola (t - 1)^2: its minimum
    1.0
    """
    low, high = bounds if bounds is not None else (min(a, b), max(a, b))
    d1 = ga + gb - 3 * (fa - fb) / (a - b)
    disc = d1 * d1 - ga * gb
    if disc < 0:
        return (low + high) / 2
    d2 = math.sqrt(disc)
    if a > b:  # name the points so that `lo` < `hi`
        a, fa, ga, b, fb, gb = b, fb, gb, a, fa, ga
    t = b - (b - a) * ((gb + d2 - d1) / (gb - ga + 2 * d2))
    return min(max(t, low), high)


class _Point:
    """One trial step: its size, loss, gradient and slope along the direction."""

    __slots__ = ("t", "f", "g", "gtd")

    def __init__(self, t: float, f: float, g: Any, gtd: float):
        self.t, self.f, self.g, self.gtd = t, f, g, gtd


def strong_wolfe(evaluate: Evaluate, d: Any, t: float, f: float, g: Any, gtd: float, c1: float = 1e-4,
                 c2: float = 0.9, tolerance_change: float = 1e-9,
                 max_ls: int = 25) -> tuple[float, Any, float, int]:
    """Search along `d` from a point with loss `f`, gradient `g` and slope ``gtd = g.d < 0``.

    Starts with step `t`; `max_ls` bounds the evaluations after the first (LBFGS passes what
    is left of its `max_eval`). Returns ``(loss, gradient, step, evaluations)`` at the step
    found, or at the best step tried when the evaluations run out.
    """
    d_scale = float(abs(d).max())
    start = _Point(0.0, f, g, gtd)
    prev = start
    new = _trial(evaluate, d, t)
    evals, iters = 1, 0
    bracket: list[_Point] | None = None
    done = False
    while iters < max_ls:  # phase 1: bracketing
        if new.f > f + c1 * new.t * gtd or (iters > 1 and new.f >= prev.f):
            bracket = [prev, new]
            break
        if abs(new.gtd) <= -c2 * gtd:
            bracket, done = [new], True
            break
        if new.gtd >= 0:
            bracket = [prev, new]
            break
        low = new.t + 0.01 * (new.t - prev.t)
        nxt = cubic_minimizer(prev.t, prev.f, prev.gtd, new.t, new.f, new.gtd, bounds=(low, new.t * 10))
        prev, new = new, _trial(evaluate, d, nxt)
        evals += 1
        iters += 1
    if bracket is None:  # out of evaluations while still growing
        bracket = [start, new]

    progress_flag = False  # the last trial landed near an end of the interval
    while not done and iters < max_ls:  # phase 2: zoom
        lo, hi = (0, 1) if bracket[0].f <= bracket[-1].f else (1, 0)
        a, b = bracket
        if abs(b.t - a.t) * d_scale < tolerance_change:
            break
        trial = cubic_minimizer(a.t, a.f, a.gtd, b.t, b.f, b.gtd)
        top, bottom = max(a.t, b.t), min(a.t, b.t)
        margin = 0.1 * (top - bottom)
        if min(top - trial, trial - bottom) < margin:
            if progress_flag or trial >= top or trial <= bottom:
                trial = top - margin if abs(trial - top) < abs(trial - bottom) else bottom + margin
                progress_flag = False
            else:
                progress_flag = True
        else:
            progress_flag = False
        new = _trial(evaluate, d, trial)
        evals += 1
        iters += 1
        if new.f > f + c1 * new.t * gtd or new.f >= bracket[lo].f:
            bracket[hi] = new
        else:
            if abs(new.gtd) <= -c2 * gtd:
                done = True
            elif new.gtd * (bracket[hi].t - bracket[lo].t) >= 0:
                bracket[hi] = bracket[lo]
            bracket[lo] = new
    lo = 0 if len(bracket) == 1 or bracket[0].f <= bracket[-1].f else 1
    best = bracket[lo]
    return best.f, best.g, best.t, evals


def _trial(evaluate: Evaluate, d: Any, t: float) -> _Point:
    loss, grad = evaluate(t)
    return _Point(t, loss, grad, float(grad @ d))
