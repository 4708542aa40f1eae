"""Weights and checkpoint I/O: ``kiln.save`` / ``kiln.load`` in the safetensors format (never pickle).

>>> kiln.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, "ckpt.safetensors")
>>> ckpt = kiln.load("ckpt.safetensors")
>>> model.load_state_dict(ckpt["model"])
"""
from .checkpoint import CheckpointError
from .safetensors import SafetensorsError, read_arrays, write_arrays
from .weights import load, load_metadata, save

__all__ = ["save", "load", "load_metadata", "CheckpointError", "SafetensorsError", "read_arrays", "write_arrays"]
