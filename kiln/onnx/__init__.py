"""ONNX export: ``kiln.onnx.export(model, example_args, "model.onnx")``.

Lowers a traced inference graph to ONNX operators. The ``onnx`` package
(``pip install kiln[onnx]``, which adds onnxruntime) is imported only when you export.

>>> kiln.onnx.export(kiln.models.lenet_5().eval(), kiln.randn(1, 1, 32, 32), "lenet.onnx",
...                  dynamic_dims={0: {0: "batch"}})
"""
from typing import Any

from .errors import ExportError, UnsupportedOpError
from .export import export

__all__ = ["export", "ExportError", "UnsupportedOpError", "SUPPORTED_OPS"]


def __getattr__(name: str) -> Any:
    if name == "SUPPORTED_OPS":  # the primitives with an ONNX mapping (the table needs the onnx package)
        from .ops import SUPPORTED_OPS  # noqa: PLC0415

        return SUPPORTED_OPS
    raise AttributeError(f"module 'kiln.onnx' has no attribute {name!r}")
