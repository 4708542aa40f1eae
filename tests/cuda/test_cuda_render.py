"""The CUDA renderer (kiln/jit/backends/cuda): a subclass of the C-style renderer that overrides only
what CUDA spells differently. Checked on the source text; tests/cuda/test_cuda_nvcc.py compiles it."""
from __future__ import annotations

import re

import pytest

from kiln.jit.backends.cuda.kernels import BLOCK, render_kernel, render_module
from kiln.jit.backends.cuda.language import CUDA, CUDALanguage
from kiln.jit.backends.render import C, CStyleLanguage
from kiln.jit.backends.render.cstyle import OPS

from cuda_patterns import fused_kernels


def test_cuda_is_a_c_style_language_sharing_the_table() -> None:
    assert isinstance(CUDA, CStyleLanguage) and type(CUDA).__mro__[1] is CStyleLanguage
    differ = {name for name in CUDA.ops if CUDA.ops[name] != OPS.get(name)}
    assert differ == {"floor_divide"}  # the C prelude's host helper becomes a __device__ template
    assert set(CUDA.ops) == set(C.ops)
    # methods CUDA overrides: only spelling hooks (the loop, half math in float), not the template expansion
    overridden = {name for name, value in vars(type(CUDA)).items() if callable(value) and name in vars(CStyleLanguage)}
    assert overridden == {"outer_loop", "compute_type"}


def test_kernel_spelling() -> None:
    lang = CUDALanguage("float16")
    sig = lang.signature("k", "void", [lang.pointer("__half", "out"), lang.pointer("__half", "in0", const=True)])
    assert sig == 'extern "C" __global__ void k(__half *__restrict__ out, const __half *__restrict__ in0) {'
    assert lang.outer_loop("i", "n") == ("for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; "
                                         "i < n; i += (long long)gridDim.x * blockDim.x) {")
    assert lang.load_value("in0", "i", "float32") == "__half2float(in0[i])"
    assert lang.store_value("out", "i", "t0", "float32") == "out[i] = __float2half_rn(t0);"
    bf = CUDALanguage("bfloat16")
    assert bf.load_value("p", "j", "float32") == "__bfloat162float(p[j])"
    assert bf.store_value("p", "j", "v", "float32") == "p[j] = __float2bfloat16_rn(v);"
    assert bf.load_value("p", "0", "float32", size=1) == "p[0]"  # scalars stay float32
    assert bf.load_value("p", "j", "bfloat16") == "__bfloat162float(p[j])"  # a graph's own bfloat16
    assert CUDA.load_value("p", "j", "float32") == "p[j]" and CUDA.storage_type("float64") == "double"
    assert lang.compute_type("float16") == lang.compute_type("float32") == "float"
    with pytest.raises(ValueError, match="expects 'float32', 'float16' or 'bfloat16', got 'int8'"):
        CUDALanguage("int8")


@pytest.mark.parametrize("storage", ["float32", "float16", "bfloat16"])
def test_layernorm_gelu_kernels(storage: str) -> None:
    kernels = fused_kernels("layernorm_gelu")
    lang = CUDALanguage(storage)
    source, names = render_module(kernels, lang)
    assert "#pragma omp" not in source and "restrict " not in source.replace("__restrict__ ", "")
    assert "#include <math.h>" not in source and "#pragma GCC" not in source
    for name in names:
        assert f'extern "C" __global__ void {name}(' in source
    rows = render_kernel(kernels[0], "ln", lang)  # the forward LayerNorm statistics: sum -> div -> sub -> mul -> sum
    assert kernels[0].name.startswith("fused_rows[sum -> div -> sub -> mul -> sum")
    assert rows.count("kiln_block_reduce(") == 2 and "blockIdx.x; o < outer; o += gridDim.x" in rows
    assert "for (long long j = threadIdx.x; j < inner; j += blockDim.x)" in rows
    assert "if (threadIdx.x == 0) out1[o] = " in rows
    if storage == "float32":
        assert "__half" not in source and "bfloat16" not in source.split("*/", 1)[1].replace("cuda_bf16", "")
    else:
        half = {"float16": "__half", "bfloat16": "__nv_bfloat16"}[storage]
        assert f"const {half} *__restrict__ in0" in rows
        assert re.search(r"const float r\d+ = \(float\)\(in\d+\[0\]\);", rows)  # the count stays float32


def test_an_elementwise_group_reads_each_input_by_its_index_form() -> None:
    kernels = [k for k in fused_kernels("mlp") if k.name == "fused[add -> relu]"]
    assert kernels, "the MLP's bias + relu is one elementwise group"
    (k,) = kernels[:1]
    src = render_kernel(k, "bias_relu", CUDA)
    assert k.forms == ["full", "row"]  # activations, and the bias broadcast over rows
    assert "const float x0 = (float)(in0[o * inner + j]);" in src and "const float x1 = (float)(in1[j]);" in src
    assert "out[o * inner + j] = t1;" in src and "const long long j = i - o * inner;" in src
    assert src == render_kernel(k.kernel_ir, "bias_relu", CUDA)  # rendered from the kernel IR alone


def test_render_kernel_refuses_other_primitives() -> None:
    with pytest.raises(TypeError, match="expects a fused elementwise or row kernel"):
        render_kernel(object(), "k")
    assert BLOCK % 32 == 0 and BLOCK <= 1024
