"""Loading a state dict into a Module: key matching, shape checks, in-place copies."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

import numpy as np

from .. import autograd
from ..tensor import Tensor, as_tensor

if TYPE_CHECKING:
    from .module import Module


class IncompatibleKeys(NamedTuple):
    """What ``load_state_dict`` returns: keys the module wanted but did not get, and extras."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def _as_kiln(value: Any) -> Tensor:
    if isinstance(value, Tensor):
        return value
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu()
    return as_tensor(np.asarray(value))


def load_state_dict_into(module: Module, state_dict: Mapping[str, Any], strict: bool) -> IncompatibleKeys:
    """Copy `state_dict` into `module`'s parameters and persistent buffers (see Module.load_state_dict)."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"load_state_dict expects a mapping of names to tensors, got {type(state_dict).__name__}")
    expected = module.state_dict(keep_vars=True)
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    mismatches = []
    sources: dict[str, Tensor] = {}
    for key, target in expected.items():
        if key not in state_dict:
            continue
        source = _as_kiln(state_dict[key])
        if tuple(source.shape) != tuple(target.shape):
            mismatches.append(f"size mismatch for {key}: copying a param with shape {tuple(source.shape)} "
                              f"from checkpoint, the shape in current model is {tuple(target.shape)}.")
        else:
            sources[key] = source
    if mismatches or (strict and (missing or unexpected)):
        raise RuntimeError(_format_errors(module, missing if strict else [], unexpected if strict else [],
                                          mismatches))
    with autograd.no_grad():
        for key, source in sources.items():
            expected[key].copy_(source.to(device=expected[key].device))
    return IncompatibleKeys(missing, unexpected)


def _format_errors(module: Module, missing: list[str], unexpected: list[str], mismatches: list[str]) -> str:
    lines = [f"Error(s) in loading state_dict for {type(module).__name__}:"]
    if missing:
        lines.append("\tMissing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
    if unexpected:
        lines.append("\tUnexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
    lines.extend("\t" + m for m in mismatches)
    fixes = []
    if missing or unexpected:
        fixes.append("load a state dict saved from the same architecture, or pass strict=False to "
                     "skip missing and unexpected keys")
    if mismatches:
        fixes.append("shape mismatches fail even with strict=False: check the layer sizes the model "
                     "was built with")
    lines.append("Fix: " + "; ".join(fixes) + ".")
    return "\n".join(lines)
