"""Weights and checkpoint I/O: ``kiln.save`` / ``kiln.load`` in the safetensors format.

State dicts and checkpoints of tensors are stored without pickle, so loading them cannot run
code; a whole object (``kiln.save(model, f)``) is pickled, and loading it needs
``weights_only=False`` or allowed globals (``kiln.serialization``).

>>> kiln.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, "ckpt.safetensors")
>>> ckpt = kiln.load("ckpt.safetensors")
>>> model.load_state_dict(ckpt["model"])
"""
from .checkpoint import CheckpointError
from .pickled import PickledCheckpointError
from .safetensors import SafetensorsError, read_arrays, write_arrays
from .weights import load, load_metadata, save

__all__ = ["save", "load", "load_metadata", "CheckpointError", "PickledCheckpointError", "SafetensorsError",
           "read_arrays", "write_arrays"]
