"""Shared helpers for the ONNX export tests: export a function and compare onnxruntime with kiln."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

import kiln


def run_onnx(model: Any, *arrays: np.ndarray) -> list[np.ndarray]:
    """Run an onnx.ModelProto in onnxruntime on positional inputs."""
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {info.name: array for info, array in zip(session.get_inputs(), arrays)}
    return session.run(None, feeds)


def kiln_outputs(fn: Callable, args: tuple) -> list[np.ndarray]:
    with kiln.no_grad():
        out = fn(*args)
    outs = out if isinstance(out, (tuple, list)) else [out]
    return [o.detach().numpy() for o in outs]


def assert_export_matches(fn: Callable, *args: Any, rtol: float = 1e-4, atol: float = 1e-5,
                          run_args: tuple | None = None, **export_kw: Any) -> Any:
    """Export fn on `args`, run it in onnxruntime on `run_args` (default: args), compare with kiln."""
    model = kiln.onnx.export(fn, args, None, **export_kw)
    inputs = run_args if run_args is not None else args
    expected = kiln_outputs(fn, inputs)
    got = run_onnx(model, *[a.numpy() for a in inputs if isinstance(a, kiln.Tensor)])
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        assert g.shape == e.shape, (g.shape, e.shape)
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, e)
    return model
