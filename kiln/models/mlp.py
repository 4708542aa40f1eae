"""A multilayer perceptron as an ``nn.Sequential``."""
from __future__ import annotations

from typing import Callable, Sequence

from .. import nn
from .activations import make_activation


def mlp(in_features: int = 784, hidden: Sequence[int] = (256, 256), out_features: int = 10,
        activation: str | Callable[[], nn.Module] = "relu", dropout: float = 0.0) -> nn.Sequential:
    """Linear -> activation [-> Dropout] for each hidden width, then a final Linear (logits).

    Dropout layers are only inserted when ``dropout > 0``, so with the defaults the
    state-dict keys are ``0.weight, 0.bias, 2.weight, ..., 4.bias``, exactly those of
    ``torch.nn.Sequential(Linear, ReLU, Linear, ReLU, Linear)``.

    >>> kiln.models.mlp()(kiln.randn(128, 784)).shape
    (128, 10)
    """
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"mlp: dropout must be in [0, 1), got {dropout}")
    layers: list[nn.Module] = []
    width = in_features
    for h in hidden:
        layers += [nn.Linear(width, h), make_activation(activation)]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = h
    layers.append(nn.Linear(width, out_features))
    return nn.Sequential(*layers)
