"""The C source of kiln's float32 transcendentals: exp, log, tanh, erf and sigmoid, vectorizable.

NumPy computes these with its own SIMD loops (and SciPy's erf), libm with others; none is
correctly rounded, so no C spelling can give NumPy's bits. These functions instead stay
within a measured distance of NumPy (tests/jit/test_vector_math.py: at most 3 ulp found
on a dense float32 grid, 4 allowed) and give exactly NumPy's result on NaN, +-inf, +-0 and
the overflow and underflow edges, while GCC vectorizes the loop they are inlined into: they
are branch-free (every special case is a select between computed values, or an addend that
is 0 elsewhere, so the compiler never needs to guard an operation that could trap), call
nothing from libm and read no tables.

* exp: x = k ln2 + r with |r| <= ln2/2 (Cody-Waite: ln2 in a 16-bit high part, so k*ln2_hi
  is exact, and a low part); exp(r) = 1 + r + r^2 P(r), P of degree 4 fitted to relative
  error 1.3e-7 (least squares on Chebyshev nodes, reweighted towards minimax); 2^k applied
  as two powers of two, so results in the subnormal range round once.
* log: x = 2^e m with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^23 first);
  log(m) = f - (f^2/2 - s (f^2/2 + R(s^2))) with f = m - 1, s = f / (2 + f) and R the
  series of 2 atanh(s) / s - 2 (Taylor: 2/3, 2/5, 2/7, 2/9); plus e ln2 in two parts.
* tanh: expm1(2|x|) / (expm1(2|x|) + 2) with the sign of x; expm1 from the reduction of
  exp (2^k p + (2^k - 1) is exact but for one rounding), so small |x| loses nothing to
  cancellation; |x| >= 9.2 gives 1.
* erf: |x| < 1: x P(x^2), P of degree 6 (relative error 1.2e-9); 1 <= |x| < 4:
  1 - exp(h(|x|) - x^2) with h(x) = log(erfc(x)) + x^2 a degree-8 polynomial in x - 2.5
  (error 1.3e-8); beyond, 1; the sign of x.
* sigmoid: NumPy's kernel's own two branches around this exp.

Every select is kiln_select (on bit patterns, see its comment), so GCC vectorizes the loops on
AVX2 and NEON as well as where masked vectors exist. Polynomial steps use fmaf wherever the
hardware fuses (x86 FMA, every aarch64), so those targets give the same bits; elsewhere a
multiply and an add. The bounds hold either way. float64 keeps libm: same names, so a template such as
``kiln_exp{f}({0})`` serves both types.
"""
from __future__ import annotations

VECMATH = r"""#include <stdint.h>
#if defined(__GNUC__)
#define KILN_INLINE static inline __attribute__((always_inline))
#else
#define KILN_INLINE static inline
#endif
/* on a function whose loop computes these, wider vectors pay (they are compute-bound): 512 bits where
   the target has them (AVX-512); elsewhere the target's own width */
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#define KILN_WIDE_VECTORS __attribute__((target("prefer-vector-width=512"), noinline))  /* inlined, it would take its caller's width */
#else
#define KILN_WIDE_VECTORS
#endif
/* a*b+c: one rounding (fmaf) wherever the hardware fuses it: x86 with FMA (x86-64-v3 and above)
   and every aarch64 CPU (AdvSIMD always has it). So AVX2, AVX-512, NEON and SVE builds give the
   same bits; an x86 build without FMA rounds twice (within the same bound of NumPy, and within
   FMA_CROSS_ULPS of the fused builds: tests/jit/test_cross_target_bits.py). */
#if defined(__FMA__) || defined(__FMA4__) || defined(__aarch64__)
#define KILN_MADD(a, b, c) fmaf(a, b, c)
#else
#define KILN_MADD(a, b, c) ((a) * (b) + (c))
#endif

/* ---- float32: branch-free, no libm calls, so the loop around them vectorizes ---- */
KILN_INLINE float kiln_f32_from_bits(int32_t i) { union { int32_t i; float f; } u; u.i = i; return u.f; }
KILN_INLINE int32_t kiln_f32_bits(float f) { union { float f; int32_t i; } u; u.f = f; return u.i; }
KILN_INLINE double kiln_f64_from_bits(int64_t i) { union { int64_t i; double f; } u; u.i = i; return u.f; }
KILN_INLINE int64_t kiln_f64_bits(double f) { union { double f; int64_t i; } u; u.f = f; return u.i; }

/* c ? a : b, chosen on bit patterns. Both sides are computed and only integer operations pick one,
   so no float operation is left to run for some lanes only: a compiler that keeps FP traps exact
   (GCC's default -ftrapping-math) vectorizes this without masked instructions (AVX2, NEON). */
KILN_INLINE float kiln_selectf(int c, float a, float b) {
    int32_t m = -(int32_t)(c != 0), ai = kiln_f32_bits(a), bi = kiln_f32_bits(b);
    return kiln_f32_from_bits(bi ^ ((ai ^ bi) & m));  /* (a & m) | (b & ~m) crashes aarch64 GCC 12's SVE */
}
KILN_INLINE double kiln_select(int c, double a, double b) {
    int64_t m = -(int64_t)(c != 0), ai = kiln_f64_bits(a), bi = kiln_f64_bits(b);
    return kiln_f64_from_bits(bi ^ ((ai ^ bi) & m));
}

/* expm1(r) for |r| <= ln2/2: r + r^2 * P(r) */
KILN_INLINE float kiln_expm1_reduced_f(float r) {
    float p = 0x1.6c37f0p-10f;
    p = KILN_MADD(p, r, 0x1.120afcp-7f);
    p = KILN_MADD(p, r, 0x1.5555eap-5f);
    p = KILN_MADD(p, r, 0x1.5554dep-3f);
    p = KILN_MADD(p, r, 0.5f);
    return KILN_MADD(r * r, p, r);
}

/* x = n ln2 + r, |r| <= ln2/2 (n an integral float) */
KILN_INLINE float kiln_reduce_ln2_f(float x, float *n) {
    const float shift = 0x1.8p23f;  /* adding it rounds to an integer */
    float k = (x * 0x1.715476p+0f + shift) - shift;
    *n = k;
    return KILN_MADD(-k, 0x1.7f7d1cp-20f, KILN_MADD(-k, 0x1.62e400p-1f, x));
}

KILN_INLINE float kiln_expf(float x) {
    float c = kiln_selectf(x > 100.0f, 100.0f, x);
    c = kiln_selectf(c < -110.0f, -110.0f, c);
    c = kiln_selectf(c != c, 0.0f, c);
    float k;
    float r = kiln_reduce_ln2_f(c, &k);
    float p = 1.0f + kiln_expm1_reduced_f(r);
    int32_t n = (int32_t)k;
    int32_t n1 = n >> 1;  /* two factors: each a normal power of two, one rounding at the end (any split
                             rounds the same; the shift floors, so no sign fix-up as n / 2 needs) */
    float s1 = kiln_f32_from_bits((n1 + 127) << 23);
    float s2 = kiln_f32_from_bits((n - n1 + 127) << 23);
    float y = (p * s1) * s2;
    return kiln_selectf(x != x, x, y);
}

/* exp(x) where it is a normal float (-87.3 < x < 88.7, not NaN): kiln_expf's bits without its
   clamps, its special cases and its second power of two (both products are exact there) */
KILN_INLINE float kiln_expf_normal(float x) {
    float k;
    float r = kiln_reduce_ln2_f(x, &k);
    float p = 1.0f + kiln_expm1_reduced_f(r);
    return p * kiln_f32_from_bits(((int32_t)k + 127) << 23);
}

KILN_INLINE float kiln_logf(float x) {
    int tiny = x < 0x1p-126f;
    float xs = kiln_selectf(tiny, x * 0x1p23f, x);  /* subnormals scaled up */
    float bias = kiln_selectf(tiny, 23.0f, 0.0f);
    int32_t ix = kiln_f32_bits(xs) - 0x3f3504f3;  /* m in [sqrt(1/2), sqrt(2)) */
    float f = kiln_f32_from_bits((ix & 0x007fffff) + 0x3f3504f3) - 1.0f;
    float s = f / (2.0f + f);
    float z = s * s;
    float R = 0x1.c71c72p-3f;              /* 2/9 */
    R = KILN_MADD(R, z, 0x1.24924ap-2f);            /* 2/7 */
    R = KILN_MADD(R, z, 0x1.99999ap-2f);            /* 2/5 */
    R = KILN_MADD(R, z, 0x1.555556p-1f);            /* 2/3 */
    R = R * z;
    float hf = 0.5f * f * f;
    float k = (float)(ix >> 23) - bias;
    float y = k * 0x1.62e400p-1f + (f - (hf - (s * (hf + R) + k * 0x1.7f7d1cp-20f)));
    /* special values as one addend that is 0 elsewhere */
    float special = kiln_selectf(x == 0.0f, -INFINITY, 0.0f);
    special += kiln_selectf(x < 0.0f, NAN, 0.0f);
    special += kiln_selectf(x == INFINITY, INFINITY, 0.0f);
    special += kiln_selectf(x != x, x, 0.0f);
    return y + special;
}

KILN_INLINE float kiln_tanhf(float x) {
    float a = fabsf(x);
    a = kiln_selectf(a < 9.2f, a, 9.2f);  /* tanh rounds to 1 beyond */
    float k;
    float r = kiln_reduce_ln2_f(a + a, &k);
    float s = kiln_f32_from_bits(((int32_t)k + 127) << 23);
    float em = KILN_MADD(s, kiln_expm1_reduced_f(r), s - 1.0f);  /* expm1(2|x|) */
    float t = em / (em + 2.0f);
    float y = kiln_f32_from_bits(kiln_f32_bits(t) | (kiln_f32_bits(x) & (int32_t)0x80000000));
    return kiln_selectf(x != x, x, y);
}

KILN_INLINE float kiln_erff(float x) {
    float a = fabsf(x);
    /* |x| < 1: x * P(x^2) */
    float z = a * a;
    float p = 0x1.492356p-14f;
    p = KILN_MADD(p, z, -0x1.a3dc1cp-11f);
    p = KILN_MADD(p, z, 0x1.5401dcp-8f);
    p = KILN_MADD(p, z, -0x1.b7f88cp-6f);
    p = KILN_MADD(p, z, 0x1.ce2cf0p-4f);
    p = KILN_MADD(p, z, -0x1.81273ep-2f);
    p = KILN_MADD(p, z, 0x1.20dd74p+0f);
    float small = a * p;
    /* 1 <= |x| <= 4: 1 - exp(h(x) - x^2), h a polynomial in x - 2.5 (erf rounds to 1 beyond 4) */
    float b = kiln_selectf(a < 4.0f, a, 4.0f);
    b = kiln_selectf(b > 1.0f, b, 1.0f);
    float t = b - 2.5f;
    float h = 0x1.b130ecp-20f;
    h = KILN_MADD(h, t, -0x1.be9408p-17f);
    h = KILN_MADD(h, t, 0x1.449efcp-14f);
    h = KILN_MADD(h, t, -0x1.b88e0ap-12f);
    h = KILN_MADD(h, t, 0x1.1bcaacp-9f);
    h = KILN_MADD(h, t, -0x1.63cfd4p-7f);
    h = KILN_MADD(h, t, 0x1.cb9f90p-5f);
    h = KILN_MADD(h, t, -0x1.692520p-2f);
    h = KILN_MADD(h, t, -0x1.8e8b72p+0f);
    float large = 1.0f - kiln_expf_normal(KILN_MADD(-b, b, h));  /* log(erfc(b)) is in [-18.1, -1.8] */
    float y = kiln_selectf(a < 1.0f, small, large);
    y = kiln_f32_from_bits(kiln_f32_bits(y) | (kiln_f32_bits(x) & (int32_t)0x80000000));
    return kiln_selectf(x != x, x, y);
}

KILN_INLINE float kiln_sigmoidf(float x) {
    float e = kiln_expf(-fabsf(x));
    return kiln_selectf(x >= 0, 1.0f / (1.0f + e), e / (1.0f + e));
}

/* ---- float64: libm (scalar), under the same names ---- */
KILN_INLINE double kiln_exp(double x) { return exp(x); }
KILN_INLINE double kiln_log(double x) { return log(x); }
KILN_INLINE double kiln_tanh(double x) { return tanh(x); }
KILN_INLINE double kiln_erf(double x) { return erf(x); }
KILN_INLINE double kiln_sigmoid(double x) {
    double e = exp(-fabs(x));
    return x >= 0 ? 1 / (1 + e) : e / (1 + e);
}
"""
