"""One library for the fused kernels of a Python replay (a symbolic plan, or a native plan's reference).

Each FusedElementwise and RowKernel would otherwise build a library of its own, a compiler run
per kernel. `share_library(kernels)` renders them into one C source instead (render/c_plan.py,
`kernels_source`), one function per distinct kernel: the same group in every layer of a model is
compiled once. Each kernel then takes its function from that library (background.KernelBuild),
which is built on the calling thread or, with background builds, in a worker thread.
"""
from __future__ import annotations

from typing import Union

from ..render.c_plan import kernels_source
from .background import Library
from .codegen import FusedElementwise
from .rowcode import RowKernel
from .toolchain import SYMBOL

Kernel = Union[FusedElementwise, RowKernel]


def share_library(kernels: list[Kernel]) -> Library | None:
    """Point `kernels` at functions of one library made for them all (None, and nothing changed, for fewer
    than two); the library is not built yet (`Library.start`, or the first kernel call, builds it)."""
    if len(kernels) < 2:
        return None
    names: dict[str, str] = {}  # a kernel's C under the placeholder name -> its function's name
    rows: dict[str, str] = {}
    elementwise: dict[str, str] = {}
    symbols = []
    for kernel in kernels:
        text = kernel.function_text(SYMBOL)
        name = names.get(text)
        if name is None:
            name = names[text] = f"kiln_kernel_{len(names)}"
            (rows if isinstance(kernel, RowKernel) else elementwise)[name] = kernel.function_text(name)
        symbols.append(name)
    library = Library(lambda: kernels_source(rows, elementwise))
    for kernel, name in zip(kernels, symbols):
        kernel.share_library(library, name)
    return library
