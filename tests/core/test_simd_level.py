"""kiln/jit/backends/cpu/simd.py names the best SIMD level a set of CPU flags or compiler macros gives."""
from __future__ import annotations

import re

from kiln.jit.backends.cpu import simd

LEVELS = ("AVX-512", "AVX2", "AVX", "SSE4.2", "SSE2", "SVE2", "SVE", "NEON", "scalar")
X86_AVX2 = {"fpu", "sse", "sse2", "ssse3", "sse4_1", "sse4_2", "avx", "fma", "avx2", "bmi2"}


def test_flags_name_the_best_level():
    assert simd.level_of_flags(X86_AVX2) == "AVX2"
    assert simd.level_of_flags(X86_AVX2 | {"avx512f", "avx512bw"}) == "AVX-512"
    assert simd.level_of_flags({"sse", "sse2"}) == "SSE2"
    assert simd.level_of_flags({"fp", "asimd", "sve"}) == "SVE"
    assert simd.level_of_flags({"fp", "asimd", "sve", "sve2"}) == "SVE2"
    assert simd.level_of_flags({"fp", "asimd"}) == "NEON"
    assert simd.level_of_flags(set()) == "scalar"


def test_macros_name_the_best_level():
    assert simd.level_of_macros({"__SSE2__", "__SSE4_2__", "__AVX__", "__AVX2__", "__FMA__"}) == "AVX2"
    assert simd.level_of_macros({"__AVX2__", "__AVX512F__"}) == "AVX-512"
    assert simd.level_of_macros({"__aarch64__", "__ARM_NEON"}) == "NEON"
    assert simd.level_of_macros({"__ARM_NEON", "__ARM_FEATURE_SVE"}) == "SVE"
    assert simd.level_of_macros(set()) == "scalar"


def test_this_machine_is_described_in_one_line():
    assert simd.cpu_level() in LEVELS
    assert simd.kernel_level() in (*LEVELS, "unknown")
    line = simd.describe()
    assert "\n" not in line and simd.cpu_model() in line
    assert re.search(r": (\S+); kernels built for (\S+) \(-march=\S+\)$", line), line
