"""PyTorch's dtype queries and thread settings (kiln/dtype_info.py, kiln/threads.py) against PyTorch."""
from __future__ import annotations

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")

FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["bool", "int32", "int64"]


@pytest.mark.parametrize("name", FLOATS)
def test_finfo_matches_pytorch(name):
    ours, theirs = kiln.finfo(getattr(kiln, name)), torch.finfo(getattr(torch, name))
    for field in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert ours.dtype == theirs.dtype
    assert kiln.finfo().dtype == "float32" and kiln.finfo("float64").bits == 64


@pytest.mark.parametrize("name", ["int32", "int64"])
def test_iinfo_matches_pytorch(name):
    ours, theirs = kiln.iinfo(getattr(kiln, name)), torch.iinfo(getattr(torch, name))
    assert (ours.bits, ours.min, ours.max, ours.dtype) == (theirs.bits, theirs.min, theirs.max, theirs.dtype)


def test_promotion_queries_match_pytorch():
    names = FLOATS[1:] + INTS  # (float16 with bfloat16 promotes as in PyTorch too; covered in test_dtypes)
    for a in names:
        for b in names:
            got = kiln.promote_types(getattr(kiln, a), getattr(kiln, b)).name
            assert got == str(torch.promote_types(getattr(torch, a), getattr(torch, b))).replace("torch.", ""), (a, b)
            assert kiln.can_cast(getattr(kiln, a), getattr(kiln, b)) == torch.can_cast(getattr(torch, a),
                                                                                     getattr(torch, b)), (a, b)
    x, i = kiln.tensor([1.0], dtype=kiln.float16), kiln.tensor([1, 2])
    tx, ti = torch.tensor([1.0], dtype=torch.float16), torch.tensor([1, 2])
    for ours, theirs in [((x, i), (tx, ti)), ((i, 2.5), (ti, 2.5)), ((x, 3), (tx, 3)), ((True, i), (True, ti))]:
        assert kiln.result_type(*ours).name == str(torch.result_type(*theirs)).replace("torch.", "")


def test_tensor_predicates_match_pytorch():
    for data in ([1.5], [0], [True], [[2, 3]]):
        k, t = kiln.tensor(np.asarray(data)), torch.tensor(np.asarray(data))
        assert kiln.is_floating_point(k) == torch.is_floating_point(t)
        assert kiln.is_complex(k) == torch.is_complex(t) and k.is_complex() == t.is_complex()
        assert k.is_signed() == t.is_signed()
        if k.numel() == 1:
            assert kiln.is_nonzero(k) == torch.is_nonzero(t) and k.is_nonzero() == t.is_nonzero()
    assert kiln.zeros(2, 3).is_same_size(kiln.ones(2, 3)) and not kiln.zeros(2).is_same_size(kiln.zeros(3))
    with pytest.raises(RuntimeError, match="is_nonzero: a tensor with 2 elements is ambiguous"):
        kiln.is_nonzero(kiln.zeros(2))
    with pytest.raises(TypeError, match="finfo: expected a floating point dtype, got int32"):
        kiln.finfo(kiln.int32)
    with pytest.raises(TypeError, match="iinfo: expected an integer dtype, got float32"):
        kiln.iinfo(kiln.float32)


def test_set_num_threads_reaches_kernels_and_openblas():
    from kiln.jit.backends.cpu import blas, parallel

    before = kiln.get_num_threads()
    try:
        kiln.set_num_threads(1)
        assert kiln.get_num_threads() == 1 == parallel.kernel_threads()
        if blas.numpy_blas() is not None:
            assert blas.blas_threads() == 1
        x = kiln.randn(64, 64)
        np.testing.assert_allclose((x @ x).numpy(), x.numpy() @ x.numpy(), rtol=1e-5, atol=1e-5)
    finally:
        kiln.set_num_threads(before)
    assert kiln.get_num_threads() == before
    with pytest.raises(ValueError, match="set_num_threads: expected a whole number of threads >= 1, got 0"):
        kiln.set_num_threads(0)
