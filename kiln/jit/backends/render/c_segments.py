"""Spell a segment of the segment IR (segment_ir.py) as the C function a native plan calls.

``long long kiln_segment_K(const void *args, char *arena)``: its argument checks (``kiln_arg`` and
``kiln_writable``, c_plan.py's readers), then each statement in order; 0 when it ran to the
end. Kernels are called by name (each rendered from the kernel IR by c_kernels.py), matrix products
by the helpers of c_gemm.py, a convolution's columns by c_im2col.py's loops.
"""
from __future__ import annotations

from .size_text import dim_variable
from .c import C
from .c_gemm import render_matrix_product
from .c_im2col import render_fold, render_unfold
from .kernel_ir import INDEX_DTYPE
from .segment_ir import (POINTER_BASES, BlockLoop, BlockPointer, Call, CheckArg, Comment, Constant, Fold,
                         MatrixProduct, Operand, Pointer, Segment, Unfold)

STEP = "    "


def pointer_text(p: Pointer) -> str:
    """A C expression for the first element of `p` (its buffer plus its offset in elements)."""
    ctype = C.index_type if p.dtype == INDEX_DTYPE else C.type_name(p.dtype)  # (index buffers; 64-bit builds)
    if p.base == "arena":
        base = f"(({ctype} *)(arena + {p.index}))"
    elif p.base == "literal":
        base = f"kiln_lit{p.index}.v"
    elif p.base == "arg":
        base = f"(({ctype} *)a{p.index})"
    else:
        raise ValueError(f"a segment pointer's base is one of {POINTER_BASES}, got {p.base!r}")
    return base if p.offset == 0 else f"({base} + {p.offset})"


def _operand(x: Operand) -> str:
    if isinstance(x, Pointer):
        return pointer_text(x)
    if isinstance(x, BlockPointer):
        return f"({pointer_text(x.pointer)} + kiln_b)"
    if isinstance(x, Constant):
        return f"{x.name}.v"
    raise TypeError(f"a kernel's operand is a Pointer, BlockPointer or Constant, got {type(x).__name__}")


def _call(c: Call, indent: str) -> str:
    args = [str(c.outer), str(c.inner)]
    if c.scratch is not None:
        args.append("(void *)0" if c.scratch == "null" else f"arena + {c.scratch}")
    args += [_operand(x) for x in c.operands]
    call = f"{c.function}({', '.join(args)})"
    if c.on_fail is not None:
        return f"{indent}if ({call}) return {c.on_fail};"
    return f"{indent}{'(void)' if c.discard else ''}{call};"


def _check(c: CheckArg) -> list[str]:
    j = c.index
    dims = ", ".join(str(d) for d in c.dims) or "0"
    storage = "" if any(isinstance(d, str) for d in c.dims) else "static "  # (sizes of the call: set per call)
    lines = [f"{STEP}{storage}const long long kiln_d{j}[] = {{{dims}}};"]
    strides = "0"
    if c.strides is not None:
        steps = ", ".join(str(s) for s in c.strides) or "0"
        lines.append(f"{STEP}static const long long kiln_s{j}[] = {{{steps}}};")
        strides = f"kiln_s{j}"
    lines += [f"{STEP}char *a{j} = kiln_arg(args, {j}, {c.dtype_code}, {len(c.dims)}, kiln_d{j}, {strides});",
              f"{STEP}if (!a{j}) return 1;"]
    if c.writable:  # a state write lands in this array: it must be writable
        lines.append(f"{STEP}if (!kiln_writable(args, {j})) return 1;")
    return lines


def _statement(s: object, indent: str = STEP) -> list[str]:
    if isinstance(s, CheckArg):
        return _check(s)
    if isinstance(s, Comment):
        return [f"{indent}/* {s.text} */"]
    if isinstance(s, Call):
        return [_call(s, indent)]
    if isinstance(s, MatrixProduct):
        return render_matrix_product(s, pointer_text, indent)
    if isinstance(s, Unfold):
        return render_unfold(s, pointer_text(s.x), pointer_text(s.out))
    if isinstance(s, Fold):
        return render_fold(s, pointer_text(s.cols), pointer_text(s.out))
    if isinstance(s, BlockLoop):
        n, block = s.size, s.block
        lines = [f"{indent}for (long long kiln_b = 0; kiln_b < {n}; kiln_b += {block}) {{",
                 f"{indent}{STEP}long long kiln_n = {n} - kiln_b < {block} ? {n} - kiln_b : {block};"]
        for inner in s.body:
            lines += _statement(inner, indent + STEP)
        return lines + [f"{indent}}}"]
    raise TypeError(f"the C segment renderer cannot spell {type(s).__name__}")


def render_segment(segment: Segment) -> str:
    """The C function ``kiln_segment_K`` of `segment`."""
    lines = [f"long long kiln_segment_{segment.index}(const void *args, char *arena) {{"]
    for k, name in enumerate(segment.dims):  # (the call's sizes, which the driver wrote into the arena)
        lines.append(f"{STEP}const long long {dim_variable(name)} = ((const long long *)arena)[{k}];")
    for s in segment.statements:
        lines += _statement(s)
    lines += [f"{STEP}return 0;", "}", ""]
    return "\n".join(lines)
