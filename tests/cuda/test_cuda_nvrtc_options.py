"""How the GPU lowering calls NVRTC (kiln/jit/backends/cuda/plan.py), checked without a GPU: the
include path for the CUDA headers the prelude needs. The compile itself needs a GPU machine."""
from __future__ import annotations


def test_nvrtc_gets_an_include_path_only_where_the_cuda_headers_are(tmp_path) -> None:
    from kiln.jit.backends.cuda.plan import HEADERS, include_options  # noqa: PLC0415

    full, partial, empty = tmp_path / "full", tmp_path / "partial", tmp_path / "empty"
    for d in (full, partial, empty):
        d.mkdir()
    for h in HEADERS:
        (full / h).write_text("")
    (partial / HEADERS[0]).write_text("")
    assert include_options([str(empty), str(partial), str(full), str(full), ""]) == [f"-I{full}"]
