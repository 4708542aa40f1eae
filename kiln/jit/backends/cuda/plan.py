"""Lowering for `CUDACompiler` on a GPU: the CPU backend's schedule, CUDA kernels, CuPy for the rest.

`lower_cuda` fuses the graph as the CPU backend does (row groups, then elementwise groups),
renders all fused groups of the plan into ONE CUDA source (kernels.render_module), loads it
as one module (`load_module`: NVRTC through ``cupy.RawModule``, cubins cached on disk under
a key holding the GPU architecture and the CUDA version), and replays the graph node by node
through the interpreter's Plan with CuPy as the array module: each fused node launches its
kernel, every other node runs its primitive's kernel on CuPy arrays (matmuls go to cuBLAS
through ``cupy.matmul``).

NOT YET VERIFIED ON A GPU (no GPU was available where this was written): see docs/cuda.md.
`build_plan` takes the array module and the module loader as arguments, so tests run the
same plan logic with NumPy and a CPU emulation of the kernels (tests/cuda/test_cuda_plan_emulated.py).
Half-precision plans (``CUDACompiler(dtype="float16")``) are rendered by `CUDALanguage` but
not wired into plans: lowering one raises NotImplementedError rather than run unverified
conversions of weights and activations.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ....ops.primitive import Primitive
from ...ir import Graph
from ..cpu.codegen import FusedElementwise
from ..cpu.fuse_graph import fuse
from ..cpu.rowcode import RowKernel
from ..interpret import Plan
from .cache_key import current_key
from .kernels import BLOCK, render_module
from .language import COMPILE_OPTIONS, CUDALanguage

MAX_BLOCKS = 65535


def cache_dir() -> Path:
    """Where compiled CUDA modules are kept: $KILN_CACHE_DIR/cuda (default ~/.cache/kiln/cuda)."""
    root = os.environ.get("KILN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kiln")
    return Path(root) / "cuda"


HEADERS = ("cuda_fp16.h", "cuda_bf16.h")  # what the CUDA prelude includes


def include_options(candidates: list[str]) -> list[str]:
    """``-I`` options for the candidate directories that hold the CUDA headers the prelude includes
    (NVRTC finds them only through an include path), in order, without duplicates."""
    options: list[str] = []
    for d in candidates:
        if d and all(os.path.isfile(os.path.join(d, h)) for h in HEADERS) and f"-I{d}" not in options:
            options.append(f"-I{d}")
    return options


def header_dirs(cupy: Any) -> list[str]:
    """Where CUDA's headers may be: $CUDA_PATH, the toolkit CuPy found, and NVIDIA's pip wheels."""
    dirs = [os.path.join(os.environ.get("CUDA_PATH", ""), "include")]
    try:
        dirs.append(os.path.join(cupy.cuda.get_cuda_path() or "", "include"))
    except Exception:  # noqa: BLE001 - CuPy may not know a toolkit; the other places remain
        pass
    try:
        import nvidia  # noqa: PLC0415 - namespace package of NVIDIA's CUDA wheels

        for root in getattr(nvidia, "__path__", []):
            dirs += sorted(str(p) for p in Path(root).glob("*/include"))
    except ImportError:
        pass
    return dirs


def load_module(source: str, cupy: Any, arch: str | None = None) -> Any:  # pragma: no cover - GPU only
    """A ``cupy.RawModule`` for `source`, from the disk cache when this GPU and CUDA version built it before."""
    options = list(COMPILE_OPTIONS) + ([f"--gpu-architecture={arch}"] if arch else [])
    path = cache_dir() / f"{current_key(source, options)}.cubin"
    if path.exists():
        return cupy.RawModule(path=str(path))
    from cupy_backends.cuda.libs import nvrtc  # noqa: PLC0415

    if arch is None:
        arch = f"sm_{cupy.cuda.Device().compute_capability}"
    program = nvrtc.createProgram(source, "kiln.cu", (), ())
    try:
        try:
            nvrtc.compileProgram(program, [*COMPILE_OPTIONS, f"--gpu-architecture={arch}",
                                           *include_options(header_dirs(cupy))])
        except nvrtc.NVRTCError as exc:
            raise RuntimeError(f"NVRTC could not compile kiln's CUDA source: {exc}\n"
                               f"{nvrtc.getProgramLog(program)}") from exc
        cubin = nvrtc.getCUBIN(program)
    finally:
        nvrtc.destroyProgram(program)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(cubin)
    os.replace(tmp, path)
    return cupy.RawModule(path=str(path))


class CUDAKernel(Primitive):
    """A fused node of the CPU schedule launched as a CUDA kernel (one row per block for row kernels).

    `function` is called as ``function(grid, block, args)``, as a ``cupy.RawKernel`` is; `xp` is
    the array module that allocates its outputs (CuPy on a GPU).
    """

    def __init__(self, fused: Any, function: Any, xp: Any):
        self.name = "cuda_" + fused.name
        self.fused, self.function, self.xp = fused, function, xp
        self.rows = isinstance(fused, RowKernel)
        group = fused.group
        if self.rows:
            self.outer, self.inner = group.space.outer, group.space.inner
            self.out_specs = [(tuple(v.shape), v.dtype.np) for v in group.outputs]
        else:
            shape = tuple(group.root.out.shape)
            self.outer, self.inner = math.prod(shape[: fused.split]), math.prod(shape[fused.split:])
            self.out_specs = [(shape, group.root.out.dtype.np)]

    def kernel(self, xp: Any, *arrays: Any) -> Any:
        xp = self.xp
        ready = [xp.ascontiguousarray(xp.asarray(a)) for a in arrays]
        outs = [xp.empty(shape, dtype) for shape, dtype in self.out_specs]
        if self.rows:
            grid = max(1, min(self.outer, MAX_BLOCKS))
        else:
            grid = max(1, min((self.outer * self.inner + BLOCK - 1) // BLOCK, MAX_BLOCKS))
        self.function((grid,), (BLOCK,), (np.int64(self.outer), np.int64(self.inner), *outs, *ready))
        return outs[0] if len(outs) == 1 else tuple(outs)


def build_plan(graph: Graph, storage: str, xp: Any, load: Callable[[str], Any], name: str) -> Plan:
    """graph -> a Plan over `xp` arrays whose fused nodes are the kernels of one CUDA module.

    `load(source)` returns the module (anything with ``get_function(name)``); on a GPU that is
    `load_module` with CuPy, and tests pass a CPU emulation of CUDA to check the plan's logic.
    """
    if storage != "float32":
        raise NotImplementedError(
            f"{name}: half-precision plans are not built yet (the CUDA renderer spells float16/bfloat16 "
            "storage, but plans do not yet convert weights and activations); use CUDACompiler(dtype='float32')")
    move_literals(graph, xp)
    fused = fuse(graph, 1, 1)
    nodes = [n for n in fused.nodes if isinstance(n.prim, (FusedElementwise, RowKernel))]
    if nodes:
        source, names = render_module([n.prim for n in nodes], CUDALanguage(storage))
        module = load(source)
        for node, kernel_name in zip(nodes, names):
            node.prim = CUDAKernel(node.prim, module.get_function(kernel_name), xp)
    plan = Plan(fused, xp=xp)
    plan.backend = name
    return plan


def move_literals(graph: Graph, xp: Any) -> None:
    """Put the graph's host literals (folded constants, captured NumPy values) on the device, in place.

    The replay hands a literal to the kernels as it is stored, and CuPy's kernels take no NumPy
    array. bfloat16 literals (ml_dtypes, which CuPy cannot hold) stay on the host.
    """
    if xp is np:
        return
    for spec in graph.specs:
        value = spec.literal
        if spec.kind == "literal" and isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind != "V":
            spec.literal = xp.asarray(value)


def lower_cuda(graph: Graph, compiler: Any, cupy: Any) -> Plan:  # pragma: no cover - GPU only
    """graph -> a Plan over CuPy arrays whose fused nodes are CUDA kernels of one NVRTC-compiled module."""
    return build_plan(graph, compiler.dtype, cupy, lambda source: load_module(source, cupy, compiler.arch),
                      compiler.name)
