"""Eager execution on a GPU runs every primitive's kernel with CuPy as `xp`: a kernel (and the
helpers of its own module that it calls) must reach NumPy only for dtypes and constants, never
to compute on arrays. A static check, so it holds on machines without a GPU too."""
from __future__ import annotations

import ast
from pathlib import Path

import kiln.ops

# what a kernel may take from NumPy: dtypes, constants and dtype logic, which CuPy shares
ALLOWED = {"bool_", "complex128", "complex64", "dtype", "e", "errstate", "finfo", "float16", "float32", "float64",
           "floating", "generic", "iinfo", "inf", "int16", "int32", "int64", "int8", "integer", "intp", "issubdtype",
           "nan", "ndarray", "newaxis", "number", "pi", "promote_types", "result_type", "can_cast", "signedinteger",
           "uint16", "uint32", "uint64", "uint8", "unsignedinteger"}
# kernels that compute on host arrays: the MPI collectives reduce host buffers (GPUs will use NCCL through CuPy),
# and the copy between devices makes a NumPy array when it copies to the CPU
HOST_ONLY = {"AllReduceMean", "DeviceCopy"}


def _numpy_uses(path: Path) -> dict[str, set[str]]:
    tree = ast.parse(path.read_text())
    helpers = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    found: dict[str, set[str]] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for fn in (f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "kernel"):
            todo, seen = [fn], set()
            while todo:
                g = todo.pop()
                if id(g) in seen:
                    continue
                seen.add(id(g))
                for n in ast.walk(g):
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "np" \
                            and n.attr not in ALLOWED:
                        found.setdefault(cls.name, set()).add(f"np.{n.attr}")
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in helpers:
                        todo.append(helpers[n.func.id])
    return found


def test_primitive_kernels_compute_through_their_array_module() -> None:
    files = sorted(Path(kiln.ops.__file__).parent.glob("*.py"))
    assert len(files) >= 10
    uses = {}
    for path in files:
        for cls, names in _numpy_uses(path).items():
            uses[f"{path.name}:{cls}"] = sorted(names)
    offenders = {k: v for k, v in uses.items() if k.split(":")[1] not in HOST_ONLY}
    assert not offenders, f"kernels computing with NumPy instead of xp (they would fail on CuPy arrays): {offenders}"
    assert any(k.endswith(":AllReduceMean") for k in uses)  # the scan sees np.* calls where they are


def test_the_scan_finds_numpy_calls(tmp_path) -> None:
    src = tmp_path / "ops.py"
    src.write_text("import numpy as np\n"
                   "def helper(a):\n    return np.exp(a)\n"
                   "class Good:\n    def kernel(self, xp, a):\n        return xp.exp(a).astype(np.float32)\n"
                   "class Bad:\n    def kernel(self, xp, a):\n        return helper(a)\n")
    assert _numpy_uses(src) == {"Bad": {"np.exp"}}


class _StrictFull:
    """An array module whose `full` takes plain numbers only, as CuPy's does (it reads no __array__)."""

    @staticmethod
    def full(shape, value, dtype):
        import numpy as np  # noqa: PLC0415

        assert not hasattr(value, "expr"), f"full got a traced {type(value).__name__}"
        return np.full(shape, value, dtype=dtype)


def test_full_hands_a_traced_hyperparameter_to_the_array_module_as_its_value() -> None:
    from kiln.jit.hyper import HyperScalar  # noqa: PLC0415
    from kiln.ops.creation import Full  # noqa: PLC0415

    lr = HyperScalar(0.25, ("hyper", "lr"))
    out = Full().kernel(_StrictFull, shape=(2,), value=lr, dtype="float32", device=None)
    assert out.tolist() == [0.25, 0.25]


class _OtherArrays:
    """Stands in for CuPy: NumPy's functions under another module object, counting matmul calls."""

    def __init__(self):
        import numpy as np  # noqa: PLC0415

        self._np, self.matmuls = np, 0

    def matmul(self, a, b):
        self.matmuls += 1
        return self._np.matmul(a, b)

    def __getattr__(self, name):
        return getattr(self._np, name)


def test_a_gpu_sum_over_leading_axes_is_one_product_with_ones() -> None:
    import numpy as np  # noqa: PLC0415

    from kiln.ops.reduce import Sum  # noqa: PLC0415

    x = np.random.default_rng(0).standard_normal((4, 6, 5)).astype(np.float32)
    for axes, keepdims in (((0,), False), ((0, 1), False), ((0, 1), True)):
        xp = _OtherArrays()
        got = Sum().kernel(xp, x, axes=axes, keepdims=keepdims)
        want = x.sum(axis=axes, keepdims=keepdims)
        assert xp.matmuls == 1 and got.shape == want.shape, (axes, keepdims)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
    for axes, x_case in (((1,), x), ((0, 2), x), ((0,), x.astype(np.int64)), ((0,), x.transpose(1, 0, 2))):
        xp = _OtherArrays()
        got = Sum().kernel(xp, x_case, axes=axes, keepdims=False)
        assert xp.matmuls == 0, axes  # not leading axes of a C-ordered float array: the array module's own sum
        np.testing.assert_allclose(got, x_case.sum(axis=axes), rtol=1e-6, atol=1e-5)
