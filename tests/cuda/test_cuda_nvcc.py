"""The CUDA renderer's output compiles with nvcc (sm_80 and sm_90), in float32, float16 and bfloat16
storage: every primitive spelling of the renderer's table, and every fused pattern the CPU backend
forms for real workloads (MLP, LayerNorm+GELU, softmax, cross-entropy, attention's scale+mask+softmax,
a GPT block; forward and backward).

This is what CI checks of the CUDA backend without a GPU. It proves the source is valid CUDA that
nvcc turns into PTX (and, in the slow test, machine code), not that it computes the right values:
tests/cuda/test_cuda_gpu.py does that on a GPU.
"""
from __future__ import annotations

import re
from functools import lru_cache

import pytest

from kiln.jit.backends.cuda.kernels import render_module
from kiln.jit.backends.cuda.language import CUDALanguage

from cuda_nvcc import compile_object, compile_ptx, needs_nvcc
from cuda_patterns import WORKLOADS, fused_kernels

pytestmark = needs_nvcc
STORAGES = ("float32", "float16", "bfloat16")


def primitive_kernels(lang: CUDALanguage, dtype: str, prefix: str) -> list[str]:
    """One kernel per entry of the renderer's table: out[i] = op(in0[i], in1[i], ...), loaded and stored
    in the language's storage type for `dtype`, computed in its compute type."""
    parts = []
    for name, template in sorted(lang.ops.items()):
        arity = 1 + max(int(k) for k in re.findall(r"\{(\d)\}", template))
        ctype, stype = lang.compute_type(dtype), lang.storage_type(dtype)
        params = ["long long n", lang.pointer(stype, "out")]
        params += [lang.pointer(stype, f"in{k}", const=True) for k in range(arity)]
        loads = [lang.local(ctype, f"x{k}", lang.load_value(f"in{k}", "i", dtype)) for k in range(arity)]
        expr = lang.render_template(name, template, ctype, [f"x{k}" for k in range(arity)])
        parts += [lang.signature(f"{prefix}_{name}", "void", params), "    " + lang.outer_loop("i", "n"),
                  *["        " + line for line in loads], "        " + lang.local(ctype, "t", expr),
                  "        " + lang.store_value("out", "i", "t", dtype), "    }", "}", ""]
    return parts


@lru_cache(maxsize=None)
def all_fused_kernels() -> tuple:
    return tuple(k for name in WORKLOADS for k in fused_kernels(name))


def module_for(storage: str) -> tuple[str, int]:
    """One source: the workloads' fused kernels, then the table's kernels (float32 storage also in double)."""
    lang = CUDALanguage(storage)
    source, names = render_module(all_fused_kernels(), lang)
    parts = [source, *primitive_kernels(lang, "float32", "prim")]
    if storage == "float32":
        parts += primitive_kernels(lang, "float64", "prim64")
    n = len(names) + len(lang.ops) * (2 if storage == "float32" else 1)
    return "\n".join(parts), n


def test_the_workloads_form_every_kind_of_fused_pattern() -> None:
    names = {name: [k.name for k in fused_kernels(name)] for name in WORKLOADS}
    for workload, kernels in names.items():
        assert kernels, f"{workload}: no fused kernels"
    flat = [k for ks in names.values() for k in ks]
    assert any(k.startswith("fused_rows[sum") for k in flat)  # LayerNorm's mean/var
    assert any(k.startswith("fused_rows[max") for k in flat)  # softmax / cross-entropy's max
    assert any(k.startswith("fused[") for k in flat) and len(flat) >= 40


@pytest.mark.parametrize("storage", STORAGES)
def test_every_primitive_and_fused_pattern_compiles_to_ptx(storage: str, tmp_path) -> None:
    source, n_kernels = module_for(storage)
    assert source.count('extern "C" __global__') == n_kernels
    for ptx in compile_ptx(source, tmp_path, f"kiln_{storage}"):
        assert len(re.findall(r"^\.visible \.entry ", ptx.read_text(), re.M)) == n_kernels


@pytest.mark.slow
def test_machine_code_assembles_for_float32_storage(tmp_path) -> None:
    """ptxas assembles the float32 module for every arch (the other storages compile to PTX above;
    assembling them too took 17 s more of the suite's time for what PTX already checks)."""
    compile_object(module_for("float32")[0], tmp_path, "kiln_float32")
