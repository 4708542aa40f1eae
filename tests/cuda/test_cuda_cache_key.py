"""Disk-cache keys of CUDA modules: each part (source, GPU architecture, CUDA version, options) changes
the key, and equivalent spellings of one architecture or version give the same key."""
from __future__ import annotations

import hashlib

import pytest

from kiln.jit.backends.cuda.cache_key import KEY_VERSION, arch_name, cuda_version_name, module_key

SRC = 'extern "C" __global__ void k(float *out) { out[0] = 1; }'


def key(**overrides) -> str:
    parts = dict(source=SRC, compute_capability=(9, 0), cuda_version=12090, options=("--fmad=false",))
    parts.update(overrides)
    source = parts.pop("source")
    return module_key(source, **parts)


def test_the_key_is_the_sha256_of_its_parts() -> None:
    expected = hashlib.sha256("\x1e".join([KEY_VERSION, "sm_90", "12.9", "--fmad=false", SRC]).encode()).hexdigest()
    assert key() == expected and len(key()) == 64


@pytest.mark.parametrize("change", [
    {"source": SRC + " "}, {"compute_capability": (8, 0)}, {"compute_capability": (8, 9)},
    {"cuda_version": 12080}, {"cuda_version": 13000}, {"options": ()}, {"options": ("--fmad=false", "-G")},
])
def test_every_part_changes_the_key(change: dict) -> None:
    assert key(**change) != key()


@pytest.mark.parametrize("spelling", [(9, 0), "90", "sm_90", 90])
def test_spellings_of_one_architecture_agree(spelling) -> None:
    assert arch_name(spelling) == "sm_90" and key(compute_capability=spelling) == key()


def test_spellings_of_one_cuda_version_agree() -> None:
    assert cuda_version_name(12090) == "12.9" and cuda_version_name(13000) == "13.0"
    assert key(cuda_version="12.9") == key()


@pytest.mark.parametrize("bad", ["ninety", "sm_", "9", (9,), (9, -1), True, None])
def test_a_bad_architecture_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="compute capability must"):
        arch_name(bad)


@pytest.mark.parametrize("bad", [0, -5, "twelve", "12.9.1.2", None, True])
def test_a_bad_cuda_version_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="CUDA version must"):
        cuda_version_name(bad)


def test_the_source_must_be_text() -> None:
    with pytest.raises(TypeError, match="as a str"):
        module_key(b"bytes", compute_capability=(9, 0), cuda_version=12090)

