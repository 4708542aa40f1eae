"""fold2d's C loop against its NumPy loop, bit for bit, and conv2d/max_pool2d gradients against PyTorch."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.functional as F
from kiln.ops import fold_native, window
from kiln.ops.primitive import REGISTRY

FOLD = REGISTRY["fold2d"]
RNG = np.random.default_rng(3)

# (cols shape (N, C, kh, kw, OH, OW), image size, stride, padding, dilation)
CASES = [
    ((2, 3, 5, 5, 6, 6), (10, 10), (1, 1), (0, 0), (1, 1)),   # a 5x5 convolution's input gradient
    ((2, 3, 2, 2, 4, 4), (8, 8), (2, 2), (0, 0), (1, 1)),     # 2x2 pooling windows, no overlap
    ((1, 2, 3, 3, 5, 4), (11, 9), (2, 2), (1, 1), (2, 1)),    # stride, padding and dilation
    ((2, 1, 3, 2, 4, 5), (6, 7), (1, 1), (1, 1), (1, 1)),     # padding cropped off again
    ((1, 1, 1, 1, 3, 3), (5, 5), (2, 2), (0, 0), (1, 1)),     # rows and columns no window covers
]


def _numpy_fold(monkeypatch: pytest.MonkeyPatch, cols: np.ndarray, **params) -> np.ndarray:
    with monkeypatch.context() as m:
        m.setattr(window, "fold2d_into", lambda *a: False)
        return FOLD.kernel(np, cols, **params)


def _needs_compiler() -> None:
    from kiln.jit.backends.cpu import toolchain  # noqa: PLC0415

    problem = toolchain.compiler_problem()
    if problem is not None:
        pytest.skip(f"no C compiler here: {problem}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("layout", ["C", "transposed", "sliced"])
def test_the_c_loop_adds_as_the_numpy_loop_does(monkeypatch, dtype, case, layout):
    _needs_compiler()
    shape, size, stride, padding, dilation = CASES[case]
    cols = RNG.standard_normal(shape).astype(dtype)
    flat = cols.reshape(-1)
    flat[::7] = -0.0  # -0.0 sums: 0.0 + -0.0 is 0.0, as in NumPy
    flat[5 % flat.size] = np.inf
    flat[-1] = np.nan
    if layout == "transposed":
        cols = np.ascontiguousarray(cols.transpose(5, 4, 3, 2, 1, 0)).transpose(5, 4, 3, 2, 1, 0)
    elif layout == "sliced":
        wide = np.zeros(shape[:-1] + (2 * shape[-1],), dtype=dtype)
        wide[..., ::2] = cols
        cols = wide[..., ::2]
    params = dict(size=size, kernel=shape[2:4], stride=stride, padding=padding, dilation=dilation)
    calls = []
    real = fold_native.fold2d_into

    def counting(*args):
        calls.append(real(*args))
        return calls[-1]

    monkeypatch.setattr(window, "fold2d_into", counting)
    got = FOLD.kernel(np, cols, **params)
    assert calls == [True], "the kernel did not run the C loop"
    want = _numpy_fold(monkeypatch, cols, **params)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()  # bit for bit, nan, inf and signed zeros included


def test_the_c_loop_runs_for_float32_and_declines_other_dtypes():
    _needs_compiler()
    out = np.zeros((1, 1, 4, 4), dtype=np.float32)
    cols = np.ones((1, 1, 2, 2, 3, 3), dtype=np.float32)
    assert fold_native.fold2d_into(out, cols, (1, 1), (1, 1))
    assert out[0, 0, 1, 1] == 4.0 and out[0, 0, 0, 0] == 1.0
    ints = np.ones((1, 1, 2, 2, 3, 3), dtype=np.int64)
    assert not fold_native.fold2d_into(np.zeros((1, 1, 4, 4), dtype=np.int64), ints, (1, 1), (1, 1))
    got = FOLD.kernel(np, ints, size=(4, 4), kernel=(2, 2), stride=(1, 1), padding=(0, 0), dilation=(1, 1))
    assert got[0, 0, 1, 1] == 4  # the NumPy loop answers


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("compiled", [False, True])
def test_conv_and_pool_gradients_match_pytorch(compiled):
    x = RNG.standard_normal((3, 2, 12, 12)).astype(np.float32)
    w = RNG.standard_normal((4, 2, 5, 5)).astype(np.float32) * 0.2
    b = RNG.standard_normal(4).astype(np.float32)

    def fn(lib, x, w, b):
        y = lib.max_pool2d(lib.relu(lib.conv2d(x, w, b, padding=1)), 2)
        return (y * y).sum()

    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    fn(torch.nn.functional, tx, tw, tb).backward()
    kx, kw, kb = (kiln.tensor(a, requires_grad=True) for a in (x, w, b))
    run = kiln.compile(lambda *t: fn(F, *t)) if compiled else (lambda *t: fn(F, *t))
    run(kx, kw, kb).backward()
    for k, t in ((kx, tx), (kw, tw), (kb, tb)):
        np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4)
