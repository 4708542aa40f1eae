"""The C reducers a row kernel calls (render/c_kernels.py), each equal to the NumPy kernel it replaces.

* ``kiln_pairwise_sum``: NumPy's pairwise summation of a contiguous row: under 8
  elements a plain loop from 0; up to 128, eight accumulators over blocks of eight,
  combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the tail; above 128, the two
  halves (the split rounded down to a multiple of 8) summed recursively and added. The
  row's result is ``0 + that``, as NumPy adds the row into a zero-initialized output.
* ``kiln_row_max``: 32 independent lanes, NaN-propagating. Any order gives NumPy's value
  except the sign of a zero maximum when the row holds both +0 and -0 (NumPy's answer then
  depends on its SIMD lanes): ``kiln_mixed_zeros`` tells those rows apart, and the kernel
  counts them so the caller can evaluate the whole group with NumPy instead.

A sequential (left-to-right) reduction needs no helper: the renderer writes its loop.
Tested against NumPy in tests/jit/test_row_kernels.py.
"""
from __future__ import annotations

REDUCERS = r"""
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
/* measured: row loops run faster with 512-bit vectors where the CPU has them (toolchain.py
   prefers 256 bits for plain elementwise loops, which store to full-size arrays) */
#pragma GCC target("prefer-vector-width=512")
#endif
/* NumPy's pairwise summation of a[0..n) (see c_reducers.py) */
#define KILN_PAIRWISE_SUM(T, S) \
    static T kiln_pairwise_sum##S(const T *restrict a, long long n) { \
        if (n < 8) { \
            T res = 0; \
            for (long long i = 0; i < n; i++) res += a[i]; \
            return res; \
        } \
        if (n <= 128) { \
            T r[8]; \
            for (int k = 0; k < 8; k++) r[k] = a[k]; \
            long long i, stop = n - n % 8; \
            for (i = 8; i < stop; i += 8) \
                for (int k = 0; k < 8; k++) r[k] += a[i + k]; \
            T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7])); \
            for (; i < n; i++) res += a[i]; \
            return res; \
        } \
        long long half = n / 2; \
        half -= half % 8; \
        return kiln_pairwise_sum##S(a, half) + kiln_pairwise_sum##S(a + half, n - half); \
    }
KILN_PAIRWISE_SUM(double, )
KILN_PAIRWISE_SUM(float, f)

/* The maximum of a[0..n), n >= 1, NaN if any element is NaN; the sign of a zero result is
   unspecified (kiln_mixed_zeros tells when it matters). 32 lanes so the loop vectorizes. */
#define KILN_ROW_MAX(T, S) \
    static T kiln_row_max##S(const T *restrict a, long long n) { \
        long long i = 0; \
        T m = a[0]; \
        if (n >= 32) { \
            T r[32]; \
            int nan[32]; \
            for (int k = 0; k < 32; k++) { r[k] = a[k]; nan[k] = a[k] != a[k]; } \
            for (i = 32; i + 32 <= n; i += 32) \
                for (int k = 0; k < 32; k++) { \
                    T v = a[i + k]; \
                    r[k] = v > r[k] ? v : r[k]; \
                    nan[k] |= v != v; \
                } \
            int any = 0; \
            for (int k = 0; k < 32; k++) any |= nan[k]; \
            if (any) return (T)NAN; \
            m = r[0]; \
            for (int k = 1; k < 32; k++) m = r[k] > m ? r[k] : m; \
        } \
        for (; i < n; i++) m = (m > a[i] || m != m) ? m : a[i]; \
        return m; \
    } \
    static int kiln_mixed_zeros##S(const T *restrict a, long long n) { \
        int pos = 0, neg = 0; \
        for (long long i = 0; i < n; i++) \
            if (a[i] == 0) { if (signbit(a[i])) neg = 1; else pos = 1; } \
        return pos && neg; \
    }
KILN_ROW_MAX(double, )
KILN_ROW_MAX(float, f)
"""
