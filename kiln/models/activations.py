"""Activation layers by name, for the model builders' ``activation=`` argument."""
from __future__ import annotations

from typing import Callable

from .. import nn

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "silu": nn.SiLU,
    "leaky_relu": nn.LeakyReLU,
}


def make_activation(activation: str | Callable[[], nn.Module]) -> nn.Module:
    """A fresh activation module from a name ('relu', 'gelu', ...) or a zero-argument factory."""
    if isinstance(activation, str):
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; expected one of {sorted(ACTIVATIONS)} "
                             "or a callable returning an nn.Module")
        return ACTIVATIONS[activation]()
    module = activation()
    if not isinstance(module, nn.Module):
        raise TypeError(f"activation factory must return an nn.Module, got {type(module).__name__}")
    return module
