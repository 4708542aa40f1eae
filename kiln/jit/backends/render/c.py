"""CLanguage: the C99 spelling of kernels for the CPU backend (cpu/codegen.py, cpu/rowcode.py).

Its prelude turns off floating-point contraction, so a*b+c rounds twice, as NumPy's separate
multiply and add do, never once in an FMA, whatever -ffp-contract the toolchain uses, and
defines the helpers its table names (NumPy's floor division).
"""
from __future__ import annotations

from typing import ClassVar

from .cstyle import OPS, CStyleLanguage

PRELUDE = r"""#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>

/* Python's float floor division as NumPy computes it: from the exact remainder fmod(a, b)
   (so a == b * q + r), the quotient moved down when r and b differ in sign, snapped to an
   integer, and a zero quotient signed like a / b. Division by zero gives a / b (inf or nan). */
#define KILN_FLOOR_DIVIDE(T, S) \
    static inline T kiln_floor_divide##S(T a, T b) { \
        if (b == 0) return a / b; \
        T r = fmod##S(a, b); \
        T q = (a - r) / b; \
        if (r != 0 && ((b < 0) != (r < 0))) q -= 1; \
        if (q == 0) return copysign##S(0, a / b); \
        T whole = floor##S(q); \
        return q - whole > (T)0.5 ? whole + 1 : whole; \
    }
KILN_FLOOR_DIVIDE(double, )
KILN_FLOOR_DIVIDE(float, f)
"""


class CLanguage(CStyleLanguage):
    """C99 for the host compiler: the shared table plus the helpers its prelude defines."""

    name: ClassVar[str] = "c"
    ops: ClassVar[dict[str, str]] = {
        **OPS,
        "floor_divide": "kiln_floor_divide{f}({0}, {1})",  # NumPy's fmod-based algorithm, in PRELUDE
    }
    prelude: ClassVar[str] = PRELUDE


C = CLanguage()
