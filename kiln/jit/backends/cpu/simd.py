"""Which CPU this is, and which SIMD level it and kiln's generated kernels use.

A speed number holds for the vector width it was measured with, so every report names both:
the CPU's own level (from /proc/cpuinfo's flags, or the platform on a Mac) and the level the
kernels are built for, which the compiler's predefined macros under kiln's ``-march`` say
(``$KILN_MARCH`` may pick a lower one than the machine's, e.g. ``x86-64-v3`` for AVX2 code on
an AVX-512 machine).

Levels, best first: ``AVX-512``, ``AVX2``, ``AVX``, ``SSE4.2``, ``SSE2`` on x86; ``SVE2``,
``SVE``, ``NEON`` on Arm; else ``scalar``.
"""
from __future__ import annotations

import platform

# (level, cpuinfo flag, compiler macro), best first: the first present names the level
_LEVELS = [
    ("AVX-512", "avx512f", "__AVX512F__"),
    ("AVX2", "avx2", "__AVX2__"),
    ("AVX", "avx", "__AVX__"),
    ("SSE4.2", "sse4_2", "__SSE4_2__"),
    ("SSE2", "sse2", "__SSE2__"),
    ("SVE2", "sve2", "__ARM_FEATURE_SVE2"),
    ("SVE", "sve", "__ARM_FEATURE_SVE"),
    ("NEON", "asimd", "__ARM_NEON"),
]


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo; on Arm Linux, its implementer and part), else `platform`'s."""
    fields = _cpuinfo_fields()
    for key in ("model name", "Model", "Hardware"):
        if fields.get(key):
            return fields[key]
    if fields.get("CPU implementer"):
        return f"Arm CPU implementer {fields['CPU implementer']}, part {fields.get('CPU part', '?')}"
    return platform.processor() or platform.machine()


def level_of_flags(flags: set[str]) -> str:
    """The best SIMD level a set of /proc/cpuinfo flags (x86 "flags" or Arm "Features") names."""
    return next((level for level, flag, _ in _LEVELS if flag in flags), "scalar")


def level_of_macros(macros: set[str]) -> str:
    """The best SIMD level a set of predefined compiler macro names (``cc -dM -E``) enables."""
    return next((level for level, _, macro in _LEVELS if macro in macros), "scalar")


def cpu_level() -> str:
    """The best SIMD level this CPU has (an Apple Silicon Mac, which has no /proc, has NEON)."""
    fields = _cpuinfo_fields()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    if not flags and platform.machine().lower() in ("arm64", "aarch64"):
        return "NEON"
    return level_of_flags(flags)


def kernel_level() -> str:
    """The SIMD level kiln's generated kernels are built for ("unknown" without a working C compiler)."""
    from . import toolchain  # noqa: PLC0415 - the toolchain probes the compiler lazily

    macros = toolchain.target_macros()
    return level_of_macros(macros) if macros else "unknown"


def describe() -> str:
    """One line for reports: "AMD EPYC 9B14: AVX-512; kernels built for AVX2 (-march=x86-64-v3)"."""
    from . import toolchain  # noqa: PLC0415

    return f"{cpu_model()}: {cpu_level()}; kernels built for {kernel_level()} (-march={toolchain.march()})"


def _cpuinfo_fields() -> dict[str, str]:
    """The first value of each field of /proc/cpuinfo (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields
