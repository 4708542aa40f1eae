"""The contraction library (convolution without im2col) gives the same bits on every target with FMA.

render/c_contraction.py picks its vector width and register tile per target with the C
preprocessor: 512-bit vectors and 6x4 tiles with AVX-512, 256-bit and 6x2 with AVX2, 128-bit and
4x4 on aarch64, 128-bit and 4x2 elsewhere. Each output element is still one sequence of fused
multiply-adds from zero over k in order, so every FMA build must agree bit for bit; the build
without FMA (plain x86-64) rounds each product and sum apart, and must stay within float32
rounding of the float64 sum.

The library's source, exactly as kiln renders it, is linked with a small `main` per target (the
targets and their flags are test_cross_target_bits.py's, plus clang, whose contraction pragma
differs from GCC's) and fed one convolution whose output
channels (37) end in a partial vector on every target and whose positions end in a partial tile.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_cross_target_bits import BASELINE, FUSED, RUN_TIMEOUT_S, X86_V3_FLAGS, Target

from kiln.jit.backends.render.c_contraction import render_contraction
from kiln.jit.backends.render.kernel_ir import Contraction
from kiln.ops import conv_native

N, C, H, W, O, KH, KW = 3, 5, 9, 7, 37, 3, 3  # padding 1, stride 1: the output is (3, 37, 9, 7)
HP, WP = H + 2, W + 2
CLANG = Target("clang x86-64-v3 (AVX2)", "clang", "clang", "x86-64-v3", cpu_flags=X86_V3_FLAGS)


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    """The padded image and the weight as an (O, C*KH*KW) matrix (each target's own pack lays it out)."""
    rng = np.random.default_rng(7)
    image = np.zeros((N, C, HP, WP), np.float32)
    image[:, :, 1:-1, 1:-1] = rng.standard_normal((N, C, H, W)) * np.exp(rng.uniform(-8, 8, (N, C, H, W)))
    return image, rng.standard_normal((O, C * KH * KW)).astype(np.float32)


def _harness() -> str:
    mo, ko, om = conv_native.conv_offsets(N, C, HP, WP, O, (KH, KW), (1, 1), (1, 1), (H, W))
    table = lambda name, values: f"static const long long {name}[] = {{{', '.join(map(str, values))}}};"  # noqa: E731
    return f"""#include <stdio.h>
#include <stdlib.h>
void kiln_contract_f32(long long outer, long long inner, const float *a, const long long *mo, const long long *ko,
                       const float *b, float *out, const long long *om, long long n, long long k, long long ldb,
                       long long ldn);
void kiln_contract_f32_pack(long long outer, long long inner, const float *src, float *b, long long ldp,
                            long long ldb, long long n);
long long kiln_contract_f32_panel(void);
{table("mo", mo)}
{table("ko", ko)}
{table("om", om)}
int main(int argc, char **argv) {{
    const long long na = {N * C * HP * WP}, nw = {O * C * KH * KW}, no = {N * O * H * W}, k = {len(ko)};
    const long long panel = kiln_contract_f32_panel(), panels = ({O} + panel - 1) / panel;
    float *a = malloc(4 * na), *w = malloc(4 * nw), *b = calloc(panels * k * panel, 4), *out = malloc(4 * no);
    FILE *f = argc == 3 ? fopen(argv[1], "rb") : NULL;
    if (!a || !w || !b || !out || !f || fread(a, 4, na, f) != (size_t)na || fread(w, 4, nw, f) != (size_t)nw)
        return 2;
    fclose(f);
    kiln_contract_f32_pack({O}, k, w, b, k * panel, panel, {O});
    kiln_contract_f32({len(mo)}, 1, a, mo, ko, b, out, om, {O}, k, panel, {H * W});
    f = fopen(argv[2], "wb");
    if (!f || fwrite(out, 4, no, f) != (size_t)no) return 3;
    return fclose(f) != 0;
}}
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("contraction_targets")
    (path / "contraction.c").write_text(render_contraction([Contraction("kiln_contract_f32", "float32")]))
    (path / "main.c").write_text(_harness())
    image, weight = _inputs()
    np.concatenate([image.ravel(), weight.ravel()]).tofile(path / "inputs.bin")
    return path


def _run(folder: Path, target: Target) -> np.ndarray:
    why = target.missing()
    if why is not None:
        pytest.skip(f"{target.name}: {why}")
    stem = re.sub(r"\W+", "_", target.name)
    program, results = folder / stem, folder / f"{stem}.bin"
    built = subprocess.run([target.compiler, *target.flags(), str(folder / "contraction.c"), str(folder / "main.c"),
                            "-o", str(program), "-lm"], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert built.returncode == 0, f"{target.name}: the build failed:\n{built.stderr[-4000:]}"
    ran = subprocess.run([*target.runner, str(program), str(folder / "inputs.bin"), str(results)],
                         capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert ran.returncode == 0, f"{target.name}: the program exited with {ran.returncode}:\n{ran.stderr[-4000:]}"
    return np.fromfile(results, np.float32).reshape(N, O, H, W)


def _float64_sum() -> np.ndarray:
    image, weight = _inputs()
    windows = np.lib.stride_tricks.sliding_window_view(image.astype(np.float64), (KH, KW), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, weight.astype(np.float64).reshape(O, C, KH, KW))


@pytest.mark.parametrize("target", [*FUSED[1:], CLANG], ids=lambda t: t.name)
def test_fma_builds_give_the_same_bits(folder, target):
    first = _run(folder, FUSED[0])
    np.testing.assert_array_equal(_run(folder, target).view(np.uint32), first.view(np.uint32))


@pytest.mark.parametrize("target", [FUSED[0], BASELINE], ids=lambda t: t.name)
def test_every_build_is_within_float32_rounding_of_the_float64_sum(folder, target):
    want = _float64_sum()
    scale = np.abs(_inputs()[0]).max() * np.abs(_inputs()[1]).max() * C * KH * KW
    np.testing.assert_allclose(_run(folder, target), want, rtol=0, atol=4e-7 * scale)
