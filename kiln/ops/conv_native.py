"""A convolution as one register-tiled contraction read straight from the padded image.

The conv2d primitive (ops/conv.py) computes ``out[n, o, y, x] = sum over (c, i, j) of
image[n, c, y*sh + i*dh, x*sw + j*dw] * weight[o, c, i, j]`` with the kernel IR's `Contraction`
(kiln/jit/backends/render/kernel_ir.py), rendered for this CPU by render/c_contraction.py:

* a: the image, zero-padded once into a C-ordered (N, C, H + 2ph, W + 2pw) copy (none when
  the padding is zero and the image is contiguous);
* mo: one offset per output position (n, y, x), into that padded image;
* ko: one offset per window term (c, i, j), relative to its position;
* b: the weight as a (C*kh*kw, O) matrix, in panels of one register tile's columns (`packed_operand`);
* om: each output position's place in the (N, O, OH, OW) result, whose channels lie OH*OW apart.

So there is no im2col buffer, and the result comes out C-ordered as PyTorch lays it out, with
no transposing copy after the product. Each output element is summed from
zero over the window in (c, i, j) order, one fused multiply-add per term where the CPU has
FMA, so its bits depend on nothing but the inputs: not the vector width, the tile, or how
many threads share the rows. Eager execution and compiled plans call this same library, so
they agree bit for bit.

Built once per process and dtype, when a convolution of that dtype first runs, with kiln's
toolchain (cached on disk like every kernel); where no C compiler works, `conv2d_direct`
answers None and the primitive computes the product with NumPy's BLAS instead (other bits,
the same everywhere in that process).
"""
from __future__ import annotations

import ctypes
import functools
import threading
from typing import Any

import numpy as np

FUNCTIONS = {np.dtype(np.float32): "kiln_contract_f32", np.dtype(np.float64): "kiln_contract_f64"}
MIN_PER_THREAD = 4  # work (rows x columns x terms) per row is given to the team threshold divided by this

_lock = threading.Lock()
_functions: dict[str, Any] = {}
_unavailable: dict[str, str] = {}  # dtype name -> why its library cannot be built here (filled once per dtype)


def contractions() -> list:
    """The contractions (kernel IR) the library holds, one per dtype."""
    from ..jit.backends.render.kernel_ir import Contraction  # noqa: PLC0415 - kiln.jit imports kiln.ops

    return [Contraction(name, dtype.name) for dtype, name in FUNCTIONS.items()]


def _function(name: str) -> Any:
    """The C function `name` of its dtype's library (``kiln_contract_f32`` and its ``_pack``, ``_pad`` and
    ``_panel``): each dtype's library is built the first time one of its functions is asked for, so float32 work
    never waits for the float64 half (each half costs the C compiler several seconds)."""
    fn = _functions.get(name)
    if fn is not None:
        return fn
    dtype, symbol = next((d, f) for d, f in FUNCTIONS.items() if name.startswith(f))
    if dtype.name in _unavailable:
        return None
    with _lock:
        if symbol not in _functions and dtype.name not in _unavailable:
            from ..jit.backends.cpu import toolchain  # noqa: PLC0415 - kiln.jit imports kiln.ops
            from ..jit.backends.render.c_contraction import render_contraction  # noqa: PLC0415
            from ..jit.backends.render.kernel_ir import Contraction  # noqa: PLC0415

            try:
                lib = toolchain.build(render_contraction([Contraction(symbol, dtype.name)]), symbol)
            except toolchain.CompilerUnavailable as exc:
                _unavailable[dtype.name] = str(exc)
                return None
            f = getattr(lib, symbol)
            f.argtypes = [ctypes.c_longlong] * 2 + [ctypes.c_void_p] * 6 + [ctypes.c_longlong] * 4
            f.restype = None
            pack = getattr(lib, f"{symbol}_pack")
            pack.argtypes = [ctypes.c_longlong] * 2 + [ctypes.c_void_p] * 2 + [ctypes.c_longlong] * 3
            pack.restype = None
            pad = getattr(lib, f"{symbol}_pad")
            pad.argtypes = [ctypes.c_longlong] * 2 + [ctypes.c_void_p] * 2 + [ctypes.c_longlong] * 6
            pad.restype = None
            for query in ("panel", "lanes"):  # (columns per panel, and per vector, on this CPU)
                fn = getattr(lib, f"{symbol}_{query}")
                fn.argtypes = []
                fn.restype = ctypes.c_longlong
                _functions[f"{symbol}_{query}"] = fn
            _functions[f"{symbol}_pack"] = pack
            _functions[f"{symbol}_pad"] = pad
            _functions[symbol] = f  # last: a reader that finds it finds the others
        return _functions.get(name)


def available() -> bool:
    """Whether the contraction library builds and loads here."""
    return _function(FUNCTIONS[np.dtype(np.float32)]) is not None


def contract(a: np.ndarray, mo: np.ndarray, ko: np.ndarray, b: np.ndarray, n: int, out: np.ndarray,
             om: np.ndarray, ldn: int) -> bool:
    """``out.flat[om[m] + j * ldn] = sum over k of a.flat[mo[m] + ko[k]] * b(k, j)`` for j < n, in C; False
    (nothing done) when the library is unavailable. `b` must come from `packed_operand`, `a` and `out`
    C-contiguous; the offsets must stay inside them (unchecked)."""
    fn = _function(FUNCTIONS[a.dtype])
    if fn is None:
        return False
    m, k = len(mo), len(ko)
    fn(m, max(1, n * k // MIN_PER_THREAD), a.ctypes.data, mo.ctypes.data, ko.ctypes.data, b.ctypes.data,
       out.ctypes.data, om.ctypes.data, n, k, b.shape[2], ldn)
    return True


@functools.lru_cache(maxsize=64)
def conv_offsets(n: int, c: int, hp: int, wp: int, o: int, kernel: tuple, stride: tuple, dilation: tuple,
                 out_hw: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mo, ko, om) of a convolution over a padded (n, c, hp, wp) image into an (n, o, OH, OW) result:
    each output position's window origin, each window term's offset from it, and each position's
    place in the result (channel 0), in elements. Read-only arrays, cached per geometry."""
    (oh, ow), (kh, kw), (sh, sw), (dh, dw) = out_hw, kernel, stride, dilation
    images, rows, columns = (np.arange(size, dtype=np.int64) for size in (n, oh, ow))
    mo = (images[:, None, None] * (c * hp * wp) + rows[None, :, None] * (sh * wp) + columns[None, None, :] * sw)
    ko = (np.arange(c, dtype=np.int64)[:, None, None] * (hp * wp)
          + np.arange(kh, dtype=np.int64)[None, :, None] * (dh * wp)
          + np.arange(kw, dtype=np.int64)[None, None, :] * dw)
    om = images[:, None, None] * (o * oh * ow) + rows[None, :, None] * ow + columns[None, None, :]
    tables = (mo.reshape(-1), ko.reshape(-1), om.reshape(-1))
    for table in tables:
        table.flags.writeable = False
    return tables


def packed_operand(matrix: np.ndarray) -> np.ndarray:
    """An (n, k) matrix transposed into the contraction's operand b: (panels, k, P), C-ordered, 64-byte aligned,
    where panel p holds columns [p*P, (p+1)*P) of the transposed (k, n) matrix, P being one register tile's
    columns on this CPU (the library's ``_panel()``), or for fewer columns than that, n rounded up to whole
    vectors (``_lanes()``), and the columns past n are zero. A (batch, n, k) stack
    gives (panels, batch * k, P), each matrix's rows after the previous one's in every panel. Call only where
    `available()`."""
    stack = np.ascontiguousarray(matrix if matrix.ndim == 3 else matrix[None])
    batch, n, k = stack.shape
    symbol = FUNCTIONS[stack.dtype]
    width = _function(f"{symbol}_panel")()
    if n < width:  # one panel, as wide as n's vectors: the contraction streams no zero columns
        lanes = _function(f"{symbol}_lanes")()
        width = -(-n // lanes) * lanes
    panels = -(-n // width)
    raw = np.empty(panels * batch * k * width + 64 // stack.itemsize, stack.dtype)
    start = (-raw.ctypes.data % 64) // stack.itemsize
    b = raw[start:start + panels * batch * k * width].reshape(panels, batch * k, width)
    if n % width:
        b[-1] = 0
    _function(f"{symbol}_pack")(batch * n, k, stack.ctypes.data, b.ctypes.data, batch * k * width, width, n)
    return b


def _padded(x: np.ndarray, top: int, left: int, height: int, width: int) -> np.ndarray:
    """`x` (N, C, H, W) placed at (top, left) in a zeroed (N, C, height, width) image, cut to fit (negative
    offsets drop its first rows or columns); `x` itself, made contiguous, when it already fills it. In C,
    planes shared by a team. Call only where `available()`."""
    n, c, h, w = x.shape
    if (top, left, height, width) == (0, 0, h, w):
        return np.ascontiguousarray(x)
    image = np.empty((n, c, height, width), x.dtype)
    _function(f"{FUNCTIONS[x.dtype]}_pad")(n * c, height * width, np.ascontiguousarray(x).ctypes.data,
                                          image.ctypes.data, h, w, top, left, height, width)
    return image


def _usable(*arrays: np.ndarray) -> bool:
    return (all(type(a) is np.ndarray and a.dtype == arrays[0].dtype and 0 not in a.shape for a in arrays)
            and arrays[0].dtype in FUNCTIONS and available())


def _image_and_offsets(x: np.ndarray, o: int, kernel: tuple, stride: tuple, padding: tuple, dilation: tuple,
                       out_hw: tuple) -> tuple[np.ndarray, tuple]:
    """The zero-padded image of a convolution of `x` into `o` channels, and its `conv_offsets`."""
    n, c, h, w = x.shape
    (ph, pw) = padding
    image = _padded(x, ph, pw, h + 2 * ph, w + 2 * pw)
    return image, conv_offsets(n, c, image.shape[2], image.shape[3], o, tuple(kernel), tuple(stride),
                               tuple(dilation), tuple(out_hw))


def conv2d_direct(x: np.ndarray, w: np.ndarray, stride: tuple, padding: tuple, dilation: tuple,
                  out_hw: tuple) -> np.ndarray | None:
    """The convolution of image `x` (N, C, H, W) with weight `w` (O, C, kh, kw): (N, O, OH, OW), C-ordered;
    None when this dtype or machine has no contraction library (the caller computes it otherwise)."""
    if not _usable(x, w):
        return None
    n, c = x.shape[:2]
    o, _, kh, kw = w.shape
    oh, ow = out_hw
    image, (mo, ko, om) = _image_and_offsets(x, o, (kh, kw), stride, padding, dilation, out_hw)
    b = packed_operand(w.reshape(o, c * kh * kw))
    out = np.empty((n, o, oh, ow), x.dtype)
    contract(image, mo, ko, b, o, out, om, oh * ow)
    return out


def conv2d_weight_grad_direct(x: np.ndarray, g: np.ndarray, kernel: tuple, stride: tuple, padding: tuple,
                              dilation: tuple) -> np.ndarray | None:
    """The weight gradient of a convolution of `x` (N, C, H, W) whose output gradient is `g` (N, O, OH, OW):
    (O, C, kh, kw), each element summed over every output position of the batch (the contraction's rows
    are the window terms, its terms the positions). None where the library cannot run it."""
    if not _usable(x, g):
        return None
    n, c = x.shape[:2]
    _, o, oh, ow = g.shape
    kh, kw = kernel
    image, (positions, terms, _) = _image_and_offsets(x, o, kernel, stride, padding, dilation, (oh, ow))
    k = c * kh * kw
    out = np.empty((o, c, kh, kw), x.dtype)
    contract(image, terms, positions, packed_operand(g.reshape(n, o, oh * ow)), o, out,
             np.arange(k, dtype=np.int64), k)
    return out


def conv2d_input_grad_direct(g: np.ndarray, w: np.ndarray, size: tuple, stride: tuple, padding: tuple,
                             dilation: tuple) -> np.ndarray | None:
    """The image gradient of a convolution with weight `w` (O, C, kh, kw) whose output gradient is `g`
    (N, O, OH, OW): (N, C, H, W). None where the library cannot run it.

    Stride 1: the convolution of `g`, padded by the kernel's extent less the padding, with `w` flipped
    and its channels swapped. Larger strides: image position y takes only the kernel rows i with
    y + padding - i*dilation a multiple of the stride, so the positions fall into stride_h x stride_w
    *phases* by (y + padding) mod stride, each its own contraction over its own taps (`_phases`):
    no multiply by an inserted zero, and no columns folded back.
    """
    if not _usable(g, w):
        return None
    (h, wd), (dh, dw) = size, dilation
    n, o, oh, ow = g.shape
    _, c, kh, kw = w.shape
    if tuple(stride) == (1, 1):
        eh, ew = dh * (kh - 1), dw * (kw - 1)
        image = _padded(g, eh - padding[0], ew - padding[1], h + eh, wd + ew)
        flipped = np.ascontiguousarray(w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3))
        return conv2d_direct(image, flipped, (1, 1), (0, 0), dilation, (h, wd))
    (top, left, hg, wg), phases = _phases(n, o, c, h, wd, oh, ow, (kh, kw), tuple(stride), tuple(padding),
                                          tuple(dilation))
    image = _padded(g, top, left, hg, wg)
    out = np.zeros((n, c, h, wd), g.dtype)
    for rows, places, terms, taps_h, taps_w in phases:
        taps = w[:, :, taps_h][:, :, :, taps_w]  # (O, C, taps_h, taps_w): the weights this phase meets
        b = packed_operand(np.ascontiguousarray(taps.transpose(1, 0, 2, 3)).reshape(c, -1))
        contract(image, rows, terms, b, c, out, places, h * wd)
    return out


def _axis_phases(size: int, out: int, k: int, s: int, p: int, d: int) -> tuple[int, int, list]:
    """Along one axis of a strided convolution's image gradient: the margin before the output gradient and
    the length of its zero-padded copy, so that every output index a tap reaches lies in it, and per phase
    r in [0, s) the image positions y with (y + p) % s == r (each reads output index (y + p - r) // s less
    a tap's step back) and the kernel taps i with i*d % s == r (step back (i*d - r) // s)."""
    phases, lowest, highest = [], 0, out - 1
    for r in range(s):
        positions = [y for y in range(size) if (y + p) % s == r]
        taps = [i for i in range(k) if (i * d) % s == r]
        if positions and taps:
            lowest = min(lowest, (positions[0] + p - r) // s - max((i * d - r) // s for i in taps))
            highest = max(highest, (positions[-1] + p - r) // s)
        phases.append((positions, taps))
    return -lowest, highest - lowest + 1, phases


@functools.lru_cache(maxsize=64)
def _phases(n: int, o: int, c: int, h: int, w: int, oh: int, ow: int, kernel: tuple, stride: tuple,
            padding: tuple, dilation: tuple) -> tuple[tuple, list]:
    """(top, left, padded height, padded width) of the output gradient's zero-padded copy, and per phase
    with taps on both axes: (rows mo, result places om, terms ko, the kernel rows, the kernel columns)."""
    top, hg, rows_h = _axis_phases(h, oh, kernel[0], stride[0], padding[0], dilation[0])
    left, wg, rows_w = _axis_phases(w, ow, kernel[1], stride[1], padding[1], dilation[1])
    phases = []
    for (ys, taps_h), ry in zip(rows_h, range(stride[0])):
        for (xs, taps_w), rx in zip(rows_w, range(stride[1])):
            if not (ys and xs and taps_h and taps_w):
                continue  # nothing reaches these positions: their gradient stays zero
            oy = (np.array(ys) + padding[0] - ry) // stride[0] + top
            ox = (np.array(xs) + padding[1] - rx) // stride[1] + left
            images = np.arange(n, dtype=np.int64)[:, None, None]
            mo = images * (o * hg * wg) + oy[None, :, None] * wg + ox[None, None, :]
            om = images * (c * h * w) + np.array(ys)[None, :, None] * w + np.array(xs)[None, None, :]
            back_h = np.array([(i * dilation[0] - ry) // stride[0] for i in taps_h])
            back_w = np.array([(j * dilation[1] - rx) // stride[1] for j in taps_w])
            ko = (np.arange(o, dtype=np.int64)[:, None, None] * (hg * wg) - back_h[None, :, None] * wg
                  - back_w[None, None, :])
            tables = [t.reshape(-1).astype(np.int64) for t in (mo, om, ko)]
            for t in tables:
                t.flags.writeable = False
            phases.append((tables[0], tables[1], tables[2], list(taps_h), list(taps_w)))
    return (top, left, hg, wg), phases
