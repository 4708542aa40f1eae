"""Optimizer updates as generated C: one native call updates every parameter of a dtype.

An optimizer describes its per-element update once, as a `NativeRule`: the C statements
for element ``i`` (reading ``p[i]``, ``g[i]`` and its state arrays), the names of the
scalars it reads, and the compile-time switches it branches on (``MAXIMIZE``,
``AMSGRAD``...). `NativeRule.kernel` renders one C function per rule, switch values and
dtype, builds it with kiln's toolchain (compiled once, cached on disk) and returns it; where
kiln builds in the background, `NativeRule.ready` starts that build in a worker thread and the
eager step takes its NumPy path until it is done. The function loops over a table of
parameters, so a step makes one native call per dtype:

    void kiln_optimizer_step(long long count, const long long *sizes, void *const *arrays,
                             const double *group_scalars, const double *param_scalars,
                             const unsigned char *first);

``arrays`` holds, per parameter, the addresses of the parameter, its gradient and its state
arrays (all C-contiguous, of the rule's dtype and the parameter's size); ``param_scalars``
holds the per-parameter scalars (such as Adam's bias corrections) and ``first`` whether
the parameter's state was just created (`NativeRule.first_step`). Scalars arrive as doubles
and are rounded to the dtype once, as NumPy rounds a Python float operand.

The generated code equals the NumPy update bit for bit when the body performs the same
operations in the same order: float32 math stays in float32, and contraction of ``a*b+c``
into an FMA is off (here and in the toolchain's flags), so every operation rounds once.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np

SYMBOL = "kiln_optimizer_step"
C_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_MATH_SUFFIX = {"float": "f", "double": ""}

# kiln_max: NumPy's maximum (NaN in either operand propagates). DECAYED_GRAD: update_math's
# decayed_grad for rules with switches DECAY, MAXIMIZE and a scalar wd. LERP: update_math's lerp_
# for rules with a switch LERP_LOW, given the weight `lerp_weight` chose.
_HELPERS = """static inline T kiln_max(T a, T b) { return a != a ? a : (b != b ? b : (a >= b ? a : b)); }
#define DECAYED_GRAD(pv, gv) (DECAY ? (MAXIMIZE ? (pv) * wd - (gv) : (pv) * wd + (gv)) \\
                                     : (MAXIMIZE ? -(gv) : (gv)))
#define LERP(start, end, w) (LERP_LOW ? (start) + ((end) - (start)) * (w) : (end) - ((end) - (start)) * (w))
"""


def lerp_weight(weight: float) -> tuple[bool, float]:
    """The ``LERP_LOW`` switch and the scalar ``LERP`` takes for update_math.lerp_'s `weight`
    (its two branches: ``start + diff * weight``, or ``end - diff * (1 - weight)``)."""
    if abs(weight) < 0.5:
        return True, weight
    return False, 1.0 - weight

_ARGTYPES = [ctypes.c_longlong] + [ctypes.c_void_p] * 5
_lock = threading.Lock()
_kernels: dict[tuple, ctypes._CFuncPtr] = {}
_building: dict[tuple, object] = {}  # (rule, switches, dtype) -> its background build (background.Build)


@dataclass(frozen=True)
class NativeRule:
    """One optimizer's per-element update in C, with what its generated function reads.

    `body` is C statements for element ``i`` of one parameter. It may read ``p[i]`` and
    ``g[i]``, read and write ``p[i]`` and each array named in `states` (the optimizer's
    state, in the order the optimizer passes them; a ``(name, switch)`` pair is passed
    only when that switch is on, and is a null pointer otherwise), and use the scalars named in
    `group_scalars` (the same for every parameter) and `param_scalars` (one value per
    parameter), each a constant of type ``T`` (``float`` or ``double``). Each name in
    `switches` is a compile-time 0/1 constant (a kernel is built per combination used);
    ``SQRT(x)``, ``kiln_max(a, b)`` (NumPy's NaN-propagating maximum), ``DECAYED_GRAD``
    and ``LERP`` (update_math's decayed_grad and lerp_, see _HELPERS) are available.
    With `first_step`, the constant ``FIRST`` is 1 for a parameter whose state was just
    created and 0 otherwise.
    """

    name: str
    states: tuple[str | tuple[str, str], ...]
    group_scalars: tuple[str, ...]
    param_scalars: tuple[str, ...]
    switches: tuple[str, ...]
    body: str
    first_step: bool = False

    def source(self, switches: tuple[bool, ...], dtype: np.dtype) -> str:
        """The C source of the step function for these switch values and dtype."""
        if len(switches) != len(self.switches):
            raise ValueError(f"the {self.name} kernel takes {len(self.switches)} switches "
                             f"{self.switches}, got {len(switches)} values")
        ctype = C_TYPES[np.dtype(dtype)]
        on = dict(zip(self.switches, switches))
        defines = [f"#define {name} {int(bool(value))}" for name, value in on.items()]
        arrays = ["        T *p = (T *)a[0];", "        const T *g = (const T *)a[1];"]
        width = 2
        for entry in self.states:
            name, switch = (entry, None) if isinstance(entry, str) else entry
            if switch is None or on[switch]:
                arrays.append(f"        T *{name} = (T *)a[{width}];")
                width += 1
            else:
                arrays.append(f"        T *{name} = 0; (void){name};")
        group = [f"    const T {name} = (T)group_scalars[{j}];" for j, name in enumerate(self.group_scalars)]
        per_param = [f"        const T {name} = (T)q[{j}];" for j, name in enumerate(self.param_scalars)]
        body = "\n".join("            " + line.strip() for line in self.body.strip().splitlines())
        loop = f"for (long long i = 0; i < n; i++) {{\n{body}\n        }}"
        if self.first_step:
            loops = [f"        if (first[k]) {{ const int FIRST = 1; {loop} }}",
                     f"        else {{ const int FIRST = 0; {loop} }}"]
        else:
            loops = [f"        {loop}"]
        from ..jit.backends.render.c import FP_CONTRACT_OFF  # noqa: PLC0415 - kiln.jit imports kiln.optim

        suffix = _MATH_SUFFIX[ctype]
        return "\n".join([
            FP_CONTRACT_OFF + "#include <math.h>\n",
            f"typedef {ctype} T;",
            f"#define SQRT(x) sqrt{suffix}(x)",
            *defines,
            _HELPERS,
            f"/* {self.name} optimizer step */",
            f"void {SYMBOL}(long long count, const long long *sizes, void *const *arrays,",
            "                 const double *group_scalars, const double *param_scalars,",
            "                 const unsigned char *first) {",
            *group,
            "    (void)group_scalars; (void)param_scalars; (void)first;",
            "    for (long long k = 0; k < count; k++) {",
            "        const long long n = sizes[k];",
            f"        void *const *a = arrays + k * {width};",
            f"        const double *q = param_scalars + k * {len(self.param_scalars)};",
            "        (void)q;",
            *arrays,
            *per_param,
            *loops,
            "    }",
            "}",
            "",
        ])

    def kernel(self, switches: tuple[bool, ...], dtype: np.dtype) -> ctypes._CFuncPtr:
        """The built step function for these switch values and dtype (CompilerUnavailable without a compiler)."""
        key = (self, switches, dtype)
        fn = _kernels.get(key)
        if fn is None:
            with _lock:
                fn = _kernels.get(key)
                if fn is None:
                    from ..jit.backends.cpu import toolchain  # noqa: PLC0415 - kiln.jit imports kiln.optim

                    fn = _bind(key, toolchain.build(self.source(switches, dtype), SYMBOL))
        return fn

    def ready(self, switches: tuple[bool, ...], dtype: np.dtype) -> bool:
        """Whether `kernel` would not wait for the compiler: the function is loaded, or the kernel cache holds
        it (loaded now). Otherwise its build starts in the background (kiln/jit/backends/cpu/background.py)
        and this is False until the build has finished, or for good if it failed (kiln warns once): the
        optimizer takes its NumPy path meanwhile, which gives the same bits."""
        key = (self, switches, dtype)
        if key in _kernels:
            return True
        from ..jit.backends.cpu import background, toolchain  # noqa: PLC0415 - kiln.jit imports kiln.optim

        with _lock:
            if key in _kernels:
                return True
            build = _building.get(key)
            if build is None:
                source = self.source(switches, dtype)
                lib = toolchain.cached(source, SYMBOL)
                if lib is not None:
                    _bind(key, lib)
                    return True
                _building[key] = background.submit(lambda: toolchain.build(source, SYMBOL, low_priority=True))
                return False
            if not build.done():
                return False
            try:
                lib = build.result()
            except toolchain.CompilerUnavailable as exc:
                background.warn_failed(exc)
                return False
            _bind(key, lib)
            del _building[key]
            return True


def _bind(key: tuple, lib: ctypes.CDLL) -> ctypes._CFuncPtr:
    """The step function of a loaded library, remembered under `key` (call with _lock held)."""
    fn = getattr(lib, SYMBOL)
    fn.argtypes = _ARGTYPES
    fn.restype = None
    _kernels[key] = fn
    return fn


_UNPROBED = object()
_problem: object = _UNPROBED


def compiler_problem() -> str | None:
    """Why native optimizer kernels cannot be built here, or None when they can (probed once per process)."""
    global _problem
    if _problem is _UNPROBED:
        from ..jit.backends.cpu import toolchain  # noqa: PLC0415 - kiln.jit imports kiln.optim

        _problem = toolchain.compiler_problem()
    return _problem  # type: ignore[return-value]
