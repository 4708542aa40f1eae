"""The demo's model and optimizer: kiln.nn/kiln.optim when present, else a functional twin.

Both versions are the same small CNN for 1x8x8 digits, with the same parameter
names (the keys of the `nn.Sequential` state_dict), so saved weights match.
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

import kiln
import kiln.functional as F  # noqa: N812

CHANNELS = (32, 64)
HIDDEN = 64
CLASSES = 10
# (state_dict key, shape, fan_in) of every parameter, in Sequential order.
PARAM_SPECS = (
    ("0.weight", (CHANNELS[0], 1, 3, 3), 9), ("0.bias", (CHANNELS[0],), 9),
    ("3.weight", (CHANNELS[1], CHANNELS[0], 3, 3), 9 * CHANNELS[0]), ("3.bias", (CHANNELS[1],), 9 * CHANNELS[0]),
    ("7.weight", (HIDDEN, 4 * CHANNELS[1]), 4 * CHANNELS[1]), ("7.bias", (HIDDEN,), 4 * CHANNELS[1]),
    ("9.weight", (CLASSES, HIDDEN), HIDDEN), ("9.bias", (CLASSES,), HIDDEN),
)
ARCHITECTURE = (f"conv3x3({CHANNELS[0]})-relu-maxpool-conv3x3({CHANNELS[1]})-relu-maxpool-"
                f"linear({HIDDEN})-relu-linear({CLASSES})")


def has_nn(*names: str) -> bool:
    """True when kiln.nn exists and defines every one of `names`."""
    try:
        import kiln.nn as nn  # noqa: PLC0415
    except ImportError:
        return False
    return all(hasattr(nn, name) for name in names)


def has_optim(*names: str) -> bool:
    try:
        import kiln.optim as optim  # noqa: PLC0415
    except ImportError:
        return False
    return all(hasattr(optim, name) for name in names)


NN_LAYERS = ("Sequential", "Conv2d", "ReLU", "MaxPool2d", "Flatten", "Linear")


def build_model() -> Any:
    """The demo CNN: a kiln.nn.Sequential if kiln.nn has the layers, else a `FunctionalCNN`."""
    if has_nn(*NN_LAYERS):
        import kiln.nn as nn  # noqa: PLC0415

        return nn.Sequential(
            nn.Conv2d(1, CHANNELS[0], 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(CHANNELS[0], CHANNELS[1], 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(4 * CHANNELS[1], HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES),
        )
    return FunctionalCNN()


class FunctionalCNN:
    """The demo CNN in kiln.functional ops over plain tensors (used until kiln.nn exists)."""

    def __init__(self) -> None:
        self.params: dict[str, kiln.Tensor] = {}
        for name, shape, fan_in in PARAM_SPECS:  # PyTorch's default init: U(-1/sqrt(fan_in), +)
            bound = 1.0 / np.sqrt(fan_in)
            self.params[name] = (kiln.rand(*shape) * (2 * bound) - bound).requires_grad_()

    def __call__(self, x: kiln.Tensor) -> kiln.Tensor:
        p = self.params
        h = F.max_pool2d(F.relu(F.conv2d(x, p["0.weight"], p["0.bias"], padding=1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, p["3.weight"], p["3.bias"], padding=1)), 2)
        h = F.relu(F.linear(h.reshape(h.shape[0], -1), p["7.weight"], p["7.bias"]))
        return F.linear(h, p["9.weight"], p["9.bias"])

    def parameters(self) -> Iterator[kiln.Tensor]:
        return iter(self.params.values())

    def state_dict(self) -> dict[str, kiln.Tensor]:
        return {name: t.detach() for name, t in self.params.items()}

    def train(self, mode: bool = True) -> "FunctionalCNN":
        return self

    def eval(self) -> "FunctionalCNN":
        return self


class MomentumSGD:
    """SGD with momentum as a NumPy update on the tensors' buffers (used until kiln.optim exists).

    Mirrors torch.optim.SGD's interface where the demo needs it: `param_groups`,
    `zero_grad()` and `step()`.
    """

    def __init__(self, params: Any, lr: float, momentum: float = 0.9):
        self.params = list(params)
        self.param_groups = [{"lr": lr, "momentum": momentum}]
        self._velocity = [np.zeros_like(p._data) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @kiln.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        for p, v in zip(self.params, self._velocity):
            if p.grad is None:
                continue
            v *= group["momentum"]
            v += p.grad._data
            p._data -= group["lr"] * v
            p._bump_version()


def build_optimizer(model: Any, lr: float, momentum: float = 0.9) -> Any:
    """kiln.optim.SGD when it exists, else `MomentumSGD`."""
    if has_optim("SGD"):
        import kiln.optim as optim  # noqa: PLC0415

        return optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    return MomentumSGD(model.parameters(), lr=lr, momentum=momentum)


def set_lr(optimizer: Any, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def describe_stack(model: Any, optimizer: Any) -> str:
    """Which implementation the demo runs on, for its header line."""
    model_kind = "kiln.functional" if isinstance(model, FunctionalCNN) else "kiln.nn"
    opt_kind = "NumPy SGD-momentum" if isinstance(optimizer, MomentumSGD) else "kiln.optim.SGD"
    return f"{model_kind} + {opt_kind}"
