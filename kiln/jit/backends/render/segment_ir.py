"""The segment IR: what one segment function of a native plan does, before C spells it.

A native plan (cpu/runtime.py) runs its segments, maximal runs of nodes generated code runs
(cpu/schedule.py), each as one function ``long long kiln_segment_K(const void *args, char *arena)``
taking the tuple of arrays Python holds for it and the calling thread's arena. cpu/segcode.py
describes each segment as a `Segment` of the statements below; render/c_segments.py spells it.

* `CheckArg`: item k of the tuple must be an exact ndarray of the given dtype, dims and byte strides
  (C-contiguous where none are given), aligned, and writable where a state write lands in it; else
  the segment returns 1 (the call is handed back to Python).
* `Call`: a kernel of the kernel IR (kernel_ir.py), rendered as a function of its own, called
  over its ``outer`` x ``inner`` space with pointers into the plan's buffers and constants. A kernel
  that returns a code makes the segment return its `on_fail` code when the kernel's is nonzero.
* `BlockLoop`: consecutive elementwise kernels over one flat space, run block by block, so each
  block's operands are still in cache for the next kernel.
* `MatrixProduct`: ``out = a @ b`` with the BLAS call NumPy's matmul makes (render/c_gemm.py).
* `Unfold`, `Fold`: a convolution's window columns written from an image (im2col) and summed
  back into one (col2im) (render/c_im2col.py).
* `Comment`: a line for the reader.

In a plan made for every size of its dynamic dims, sizes and offsets are C expressions of the call's
sizes (strings), which the segment reads from the arena's first bytes (`Segment.dims`).

Buffers are `Pointer`s: an item of the argument tuple, a byte offset into the arena, or a literal
constant of the plan, plus an offset in elements. Constants read whole (a fill's value, the zero a
sum starts from) are `Constant`s.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

POINTER_BASES = ("arg", "arena", "literal")


@dataclass(frozen=True)
class Pointer:
    """The first element of a buffer of `dtype`: tuple item `index` ("arg"), the arena at byte `index`
    ("arena") or literal constant `index` ("literal"), moved on by `offset` elements."""

    dtype: str
    base: str
    index: int
    offset: int = 0


@dataclass(frozen=True)
class BlockPointer:
    """`pointer` moved on to the first element of the current block of a `BlockLoop`."""

    pointer: Pointer


@dataclass(frozen=True)
class Constant:
    """A named constant of the plan (its elements' bits written into the source), read whole."""

    name: str


Operand = Union[Pointer, BlockPointer, Constant]


@dataclass(frozen=True)
class CheckArg:
    """Item `index` of the argument tuple: an exact ndarray of `dtype` (number `dtype_code` in the plan's table of
    dtype objects, cpython_layout.DESCR_DTYPES) with `dims`, C-contiguous (`strides` None) or of these byte
    `strides`, aligned; `writable` when the plan writes into it. Else the segment returns 1."""

    index: int
    dtype: str
    dtype_code: int
    dims: tuple[int, ...]
    strides: tuple[int, ...] | None = None
    writable: bool = False


@dataclass(frozen=True)
class Call:
    """``function(outer, inner[, scratch], operands...)``: a kernel over an `outer` x `inner` space.

    `scratch`: None when the kernel takes no scratch row, an arena byte offset, or "null". `on_fail`: the
    segment returns this code when the kernel returns nonzero. `discard`: the kernel's result is ignored.
    """

    function: str
    outer: int | str
    inner: int | str
    operands: tuple[Operand, ...]
    scratch: int | str | None = None
    on_fail: int | None = None
    discard: bool = False


@dataclass(frozen=True)
class BlockLoop:
    """`body` (comments and calls over ``1`` x the block's length, ``kiln_n``) run for each block of `block`
    elements of a flat space of `size` elements, in order."""

    size: int
    block: int
    body: tuple[Union["Comment", Call], ...]


@dataclass(frozen=True)
class MatrixProduct:
    """``out = a @ b`` as NumPy's matmul makes it, in `dtype` (float32 or float64): one product of (dm, dn) by
    (dn, dp) per batch index, or one over every batch's rows where `loops` is empty.

    `a_strides`, `b_strides`: element strides of each operand's two core axes; `loops`: (size, a stride, b
    stride, out stride) per batch dim, outermost first; `mode`: "product" (the helper that follows NumPy's
    choice of BLAS routine), "transposed" (a float32 product of few rows by a transposed matrix, made as
    the transposed product: kiln.ops.linalg.transposed_product) or "empty" (nothing to compute).
    `transposed_rows` (lo, hi): a "product" whose row count is a size of the call, made as the transposed
    product when it lies in [lo, hi] (the other conditions of that choice hold for every size)."""

    dtype: str
    out: Pointer
    a: Pointer
    b: Pointer
    dm: int
    dn: int
    dp: int
    a_strides: tuple[int, int]
    b_strides: tuple[int, int]
    loops: tuple[tuple[int, int, int, int], ...] = ()
    mode: str = "product"
    transposed_rows: tuple[int, int] | None = None


@dataclass(frozen=True)
class Unfold:
    """A convolution's window columns of image `x` (N, C, H, W; element `strides`) written to `out`, whose N, C,
    KH and KW axes have element strides `out_strides` and whose (OH, OW) planes are contiguous; padding
    reads `pad_value`."""

    dtype: str
    x: Pointer
    out: Pointer
    image: tuple[int, int, int, int]  # N, C, H, W
    strides: tuple[int, int, int, int]
    window: tuple[int, int, int, int]  # KH, KW, OH, OW
    out_strides: tuple[int, int, int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    pad_value: float


Size = Union[int, str]
"""A size or stride: a number, or the name of a variable that holds it (a kernel built for every size)."""


@dataclass(frozen=True)
class Fold:
    """Window columns `cols` (N, C, KH, KW, OH and OW axes at element strides `cols_strides`) summed into the
    C-ordered (N, C, H, W) image `out`, which starts at zero; each image element adds its terms in row-major
    order of (KH, KW, OH, OW), as the eager kernel does. Sizes may be names (render/c_im2col.py's
    size-generic function for eager fold2d)."""

    dtype: str
    cols: Pointer | str
    out: Pointer | str
    image: tuple[Size, Size, Size, Size]  # N, C, H, W
    window: tuple[Size, Size, Size, Size]  # KH, KW, OH, OW
    cols_strides: tuple[Size, Size, Size, Size, Size, Size]
    stride: tuple[Size, Size]
    dilation: tuple[Size, Size]


@dataclass(frozen=True)
class Comment:
    """A line for the reader."""

    text: str


SegmentStatement = Union[CheckArg, Call, BlockLoop, MatrixProduct, Unfold, Fold, Comment]


@dataclass(frozen=True)
class Segment:
    """Segment `index` of a plan: its statements, in order (the argument checks first).

    `dims`: the names of the symbolic sizes of a plan made for every size (cpu/size_guards.py), in the order the
    arena's first bytes hold them for the call (int64 each); its statements' sizes may then be C expressions of
    them (strings)."""

    index: int
    statements: tuple[SegmentStatement, ...]
    dims: tuple[str, ...] = ()


# ---- text ------------------------------------------------------------------------------------
def _pointer_text(x: object) -> str:
    if isinstance(x, BlockPointer):
        return f"{_pointer_text(x.pointer)}+block"
    if isinstance(x, Constant):
        return x.name
    if isinstance(x, Pointer):
        base = {"arg": "a", "arena": "arena@", "literal": "lit"}[x.base] + str(x.index)
        return base + (f"+{x.offset}" if x.offset else "")
    return str(x)


def _lines(s: object, indent: str) -> list[str]:
    if isinstance(s, CheckArg):
        layout = "C order" if s.strides is None else f"byte strides {list(s.strides)}"
        return [f"{indent}check a{s.index}: {s.dtype}{list(s.dims)}, {layout}"
                + (", writable" if s.writable else "") + " or return 1"]
    if isinstance(s, Comment):
        return [f"{indent}# {s.text}"]
    if isinstance(s, Call):
        args = [f"outer={s.outer}", f"inner={s.inner}"]
        if s.scratch is not None:
            args.append("scratch=null" if s.scratch == "null" else f"scratch=arena@{s.scratch}")
        args += [_pointer_text(x) for x in s.operands]
        tail = f" or return {s.on_fail}" if s.on_fail is not None else (" (result ignored)" if s.discard else "")
        return [f"{indent}call {s.function}({', '.join(args)}){tail}"]
    if isinstance(s, BlockLoop):
        return [f"{indent}for each block of {s.block} of {s.size} elements:",
                *[line for inner in s.body for line in _lines(inner, indent + "  ")]]
    if isinstance(s, MatrixProduct):
        loops = f" in {len(s.loops)} batch loop(s)" if s.loops else ""
        return [f"{indent}{_pointer_text(s.out)} = {_pointer_text(s.a)} @ {_pointer_text(s.b)}: {s.dtype} "
                f"({s.dm}x{s.dn} @ {s.dn}x{s.dp}), {s.mode}{loops}"]
    if isinstance(s, Unfold):
        return [f"{indent}{_pointer_text(s.out)} = unfold {_pointer_text(s.x)}: {s.dtype} image {list(s.image)}, "
                f"window {list(s.window)}, stride {list(s.stride)}, padding {list(s.padding)}"]
    if isinstance(s, Fold):
        return [f"{indent}{_pointer_text(s.out)} = fold {_pointer_text(s.cols)}: {s.dtype} image {list(s.image)}, "
                f"window {list(s.window)}, stride {list(s.stride)}"]
    raise TypeError(f"no text for segment statement {type(s).__name__}")


def segment_text(segment: Segment) -> str:
    """`segment` as readable text, one statement per line (a NativePlan's ``segment_ir``)."""
    head = f"segment {segment.index}" + (f" (sizes {', '.join(segment.dims)} from the arena)" if segment.dims else "")
    return "\n".join([head, *[line for s in segment.statements for line in _lines(s, "  ")]])
