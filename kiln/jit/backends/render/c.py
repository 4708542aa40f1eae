"""CLanguage: the C99 spelling of kernels for the CPU backend (cpu/codegen.py, cpu/rowcode.py).

Its prelude turns off floating-point contraction, so a*b+c rounds twice, as NumPy's separate
multiply and add do, never once in an FMA, whatever -ffp-contract the toolchain uses, and
defines the helpers its table names: NumPy's floor division, and the vectorizable
transcendentals of vecmath.py (exp, log, tanh, erf, sigmoid: within a few ulp of NumPy in
float32, libm in float64).
"""
from __future__ import annotations

from typing import ClassVar

from .cstyle import OPS, CStyleLanguage
from .openmp import BOUNDS, TEAM_PRELUDE, team_wrapper
from .vecmath import VECMATH

FP_CONTRACT_OFF = r"""#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
"""
"""No fused multiply-add where the source does not ask for one: what every source kiln generates starts with
(the contraction library, c_contraction.py, asks for the opposite)."""

PRELUDE = FP_CONTRACT_OFF + r"""#include <math.h>

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

/* A kernel's loops stay a function of their own: inlined into a plan's segment, its restrict
   pointers would lose their meaning there and the loops would stay scalar. */
#if defined(__GNUC__) || defined(__clang__)
#define KILN_KERNEL_LOOPS static __attribute__((noinline))
#else
#define KILN_KERNEL_LOOPS static
#endif
"""


class CLanguage(CStyleLanguage):
    """C99 for the host compiler: the shared table plus the helpers its prelude defines."""

    name: ClassVar[str] = "c"
    ops: ClassVar[dict[str, str]] = {
        **OPS,
        "floor_divide": "kiln_floor_divide{f}({0}, {1})",  # NumPy's fmod-based algorithm, in PRELUDE
        # vecmath.py: branch-free float32 versions (libm for double)
        "exp": "kiln_exp{f}({0})",
        "log": "kiln_log{f}({0})",
        "tanh": "kiln_tanh{f}({0})",
        "erf": "kiln_erf{f}({0})",
        "sigmoid": "kiln_sigmoid{f}({0})",
    }
    # float selects chosen on bit patterns (kiln_select in vecmath.py), comparisons combined without
    # short-circuits: no float operation runs for some lanes only, so the loops vectorize on AVX2 and
    # NEON under GCC's default -ftrapping-math too. Same results as the shared ternaries.
    float_selects: ClassVar[dict[str, str]] = {
        "where": "kiln_select{f}({0}, {1}, {2})",
        "maximum": "kiln_select{f}(({0} > {1}) | ({0} != {0}), {0}, {1})",
        "minimum": "kiln_select{f}(({0} < {1}) | ({0} != {0}), {0}, {1})",
        "relu": "kiln_select{f}(({0} > 0) | ({0} != {0}), {0}, 0)",
        "sign": "kiln_select{f}({0} != {0}, {0}, ({0} > 0) - ({0} < 0))",
    }
    prelude: ClassVar[str] = PRELUDE + "\n" + VECMATH + TEAM_PRELUDE
    wide_qualifier: ClassVar[str] = "KILN_WIDE_VECTORS"  # defined in VECMATH (512-bit vectors on x86 GCC)

    def compute_type(self, dtype_name: str) -> str:
        """A bool is computed in an int (0 or 1) and stored as a byte: GCC vectorizes a loop that turns
        a comparison into a float through an int, not through an unsigned char."""
        return "int" if dtype_name == "bool" else self.type_name(dtype_name)

    def spelling(self, prim_name: str, template: str | None, out_ctype: str) -> str | None:
        """The shared spelling, but a float select (where, maximum, minimum, relu, sign) on bit patterns."""
        if out_ctype in self.math_suffixes and prim_name in self.float_selects:
            return self.float_selects[prim_name]
        return super().spelling(prim_name, template, out_ctype)

    # ---- threads (openmp.py): a kernel's loops run over the bounds its range function is given ----
    def outer_loop(self, var: str, stop: str) -> str:
        return self.loop(var, BOUNDS[1], start=BOUNDS[0])

    def inner_loop(self, var: str, stop: str) -> str:
        return self.loop(var, BOUNDS[3], start=BOUNDS[2])

    def function(self, name: str, ret: str, params: list[str], body: list[str], storage: str = "",
                 wide: bool = False, split_inner: bool = False, teams: bool = True) -> list[str]:
        """NAME_range (the loops over the bounds it is given) and NAME, which runs it serially or on
        an OpenMP team (see openmp.py; only serially where `teams` is False)."""
        bounds = [f"{self.index_type} {b}" for b in BOUNDS]
        ranged = [self.signature(f"{name}_range", ret, [*bounds, *params], "KILN_KERNEL_LOOPS", wide=wide), *body, "}", ""]
        return ranged + team_wrapper(name, ret, params, split_inner, self.signature(name, ret, params, storage), teams)


C = CLanguage()
