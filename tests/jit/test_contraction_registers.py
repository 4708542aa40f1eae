"""The contraction's k loop keeps its accumulators in registers on every target.

render/c_contraction.py writes a tile as GCC/clang vector variables and counts on the compiler to
hold them in registers: each term of the k loop is then one broadcast of ``a`` and one fused
multiply-add per accumulator. A vector whose address is taken, or that is indexed by a variable lane,
lives in memory instead. On an AVX2 Zen 3 that turned every term into a store of each accumulator
to the stack and a store-forwarding stall on the weight row (the compiled LeNet-5 step took 16-18 ms
instead of 6-8). The results keep their bits either way, so only the assembly shows it.

Each target's assembly (``-S``, kiln's kernel flags) is read for the innermost loops holding a
fused multiply-add; none may read or write the stack.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kiln.jit.backends.cpu import toolchain
from kiln.jit.backends.render.c_contraction import render_contraction
from kiln.jit.backends.render.kernel_ir import Contraction

# (name, compiler, Debian package, -march, FMA mnemonic, stack operand)
X86_STACK = re.compile(r"\(%[re]?sp\)|\(%[re]?bp\)")
ARM_STACK = re.compile(r"\[sp\b|\[x29\b")
TARGETS = [
    ("gcc x86-64-v3 (AVX2)", "gcc", "gcc", "x86-64-v3", "vfmadd", X86_STACK),
    ("gcc znver3 (AVX2, the CPU where it was found)", "gcc", "gcc", "znver3", "vfmadd", X86_STACK),
    ("gcc x86-64-v4 (AVX-512)", "gcc", "gcc", "x86-64-v4", "vfmadd", X86_STACK),
    ("clang x86-64-v3 (AVX2)", "clang", "clang", "x86-64-v3", "vfmadd", X86_STACK),
    ("gcc aarch64 (NEON)", "aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu", "armv8.2-a", "fmla", ARM_STACK),
]


def _flags(compiler: str, march: str) -> list[str]:
    drop = ("-march=", "-shared", "-fPIC") + (("-mprefer-vector-width",) if compiler.startswith("aarch64") else ())
    return [f"-march={march}", *(f for f in toolchain.FLAGS if not f.startswith(drop))]


def innermost_loops(assembly: str) -> list[list[str]]:
    """The instructions of each loop that is one block: from a label to a jump back to it, with no label between."""
    lines = [line.split("#")[0].split("//")[0].strip() for line in assembly.splitlines()]
    loops, open_at = [], {}
    for i, line in enumerate(lines):
        label = re.fullmatch(r"(\.?L\w+):", line)
        if label:
            open_at = {label.group(1): i}  # a label ends every block before it
            continue
        jump = re.match(r"(?:j\w+|b\.?\w*|cbn?z|tbn?z)\s+(?:\w+,\s*)*(\.?L\w+)$", line)
        if jump and jump.group(1) in open_at:
            loops.append([x for x in lines[open_at[jump.group(1)] + 1:i + 1] if x and not x.startswith(".")])
    return loops


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("contraction_registers") / "contraction.c"
    path.write_text(render_contraction([Contraction("kiln_contract_f32", "float32")]))
    return path


@pytest.mark.parametrize("name, compiler, package, march, fma, stack", TARGETS, ids=[t[0] for t in TARGETS])
def test_the_k_loop_keeps_its_accumulators_in_registers(source, name, compiler, package, march, fma, stack):
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} is not installed (Debian package {package})")
    built = subprocess.run([compiler, *_flags(compiler, march), "-S", "-o", "-", str(source)], capture_output=True,
                           text=True, timeout=300)
    assert built.returncode == 0, f"{name}: {built.stderr[-3000:]}"
    loops = [body for body in innermost_loops(built.stdout) if any(line.startswith(fma) for line in body)]
    assert loops, f"{name}: no loop with {fma} found: the assembly reader no longer matches this compiler's output"
    spilling = [body for body in loops if any(stack.search(line) for line in body)]
    assert not spilling, (f"{name}: {len(spilling)} of {len(loops)} multiply-add loops use the stack, e.g.:\n"
                          + "\n".join(spilling[0]))
