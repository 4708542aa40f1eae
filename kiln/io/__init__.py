"""Weights I/O: ``kiln.save`` / ``kiln.load`` in the safetensors format (never pickle).

>>> kiln.save(model, "model.safetensors")
>>> model.load_state_dict(kiln.load("model.safetensors"))
"""
from .safetensors import SafetensorsError, read_arrays, write_arrays
from .weights import load, load_metadata, save

__all__ = ["save", "load", "load_metadata", "SafetensorsError", "read_arrays", "write_arrays"]
