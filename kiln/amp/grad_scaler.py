"""`GradScaler`: loss scaling for low-precision training, with PyTorch's state machine and scale schedule.

``scaler.scale(loss).backward()`` multiplies the loss (so small float16 gradients don't
underflow); ``scaler.step(opt)`` divides the gradients back (`unscale_`) and skips the
step when any is inf or NaN; ``scaler.update()`` halves the scale after a skipped step and
doubles it after `growth_interval` good ones. It works on the CPU and with float32 too
(the scale and unscale are exact for powers of two), and with ``enabled=False`` every
call passes straight through.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..autograd import no_grad
from ..device import cuda_is_available
from ..tensor import Tensor

READY, UNSCALED, STEPPED = "ready", "unscaled", "stepped"


class GradScaler:
    """Scale the loss, unscale the gradients, skip steps with inf/NaN gradients, and adapt the scale.

    >>> scaler = kiln.amp.GradScaler("cpu")
    >>> for x, y in loader:
    ...     opt.zero_grad()
    ...     with kiln.autocast("cpu"):
    ...         loss = F.cross_entropy(model(x), y)
    ...     scaler.scale(loss).backward()
    ...     scaler.unscale_(opt); kiln.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    ...     scaler.step(opt)
    ...     scaler.update()
    """

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        if not isinstance(device, str) or device.split(":")[0] not in ("cpu", "cuda"):
            raise ValueError(f"GradScaler: device must be 'cpu' or 'cuda', got {device!r}")
        if enabled and device.startswith("cuda") and not cuda_is_available():
            warnings.warn("kiln.amp.GradScaler is enabled, but CUDA is not available. Disabling. (Use "
                          "GradScaler('cpu') or enabled=kiln.cuda.is_available().)", UserWarning, stacklevel=2)
            enabled = False
        self._device = device
        self._enabled = bool(enabled)
        if self._enabled:
            if not growth_factor > 1.0:
                raise ValueError(f"GradScaler: growth_factor should be > 1, got {growth_factor}")
            if not 0.0 < backoff_factor < 1.0:
                raise ValueError(f"GradScaler: backoff_factor should be in (0, 1), got {backoff_factor}")
            if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) or growth_interval < 1:
                raise ValueError(f"GradScaler: growth_interval should be a positive int, got {growth_interval!r}")
            if not init_scale > 0:
                raise ValueError(f"GradScaler: init_scale should be positive, got {init_scale}")
        self._init_scale = float(init_scale)
        self._scale: np.float32 | None = None  # float32, as PyTorch's scale tensor; set on first use
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._per_optimizer: dict[int, dict[str, Any]] = {}

    # ---- the training-step API --------------------------------------------------------
    def scale(self, outputs: Any) -> Any:
        """`outputs` (a tensor, or tensors in lists/tuples/dicts) multiplied by the scale; unchanged if disabled."""
        if not self._enabled:
            return outputs
        if self._scale is None:
            self._scale = np.float32(self._init_scale)
        factor = float(self._scale)

        def apply(value: Any) -> Any:
            if isinstance(value, Tensor):
                return value * factor
            if isinstance(value, dict):
                return {k: apply(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return type(value)(apply(v) for v in value)
            raise TypeError(f"GradScaler.scale expects a tensor or lists/tuples/dicts of tensors, got "
                            f"{type(value).__name__}")

        return apply(outputs)

    def unscale_(self, optimizer: Any) -> None:
        """Divide the gradients of `optimizer`'s parameters by the scale, in place, and record inf/NaN.

        Call it before clipping gradients; `step` then does not unscale again. Once per
        optimizer between two `update` calls.
        """
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["stage"] == UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] == STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        if self._scale is None:
            raise RuntimeError("GradScaler.unscale_ was called before scale(); scale the loss first: "
                               "scaler.scale(loss).backward()")
        inv_scale = np.float32(np.float64(1.0) / np.float64(self._scale))  # as PyTorch: reciprocal in double
        found_inf, seen = False, False
        with no_grad(), np.errstate(all="ignore"):  # inf/NaN gradients are what this looks for: no warning
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    seen = True
                    if g.dtype.name == "float16":
                        raise ValueError("Attempting to unscale FP16 gradients. Keep the parameters in float32 "
                                         "(autocast computes in float16 while the weights stay float32).")
                    data = g._data
                    if not data.flags.writeable or g._base is not None:
                        p.grad = g = Tensor._wrap(data.copy(), g._device)
                        data = g._data
                    data *= inv_scale.astype(data.dtype)
                    g._bump_version()
                    if not found_inf and not np.isfinite(data).all():
                        found_inf = True
        state["found_inf"] = found_inf if seen else None  # None: no gradient to check
        state["stage"] = UNSCALED

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """`optimizer.step()` unless the unscaled gradients hold inf or NaN (then the step is skipped).

        Returns what `optimizer.step` returned, or None when skipped.
        """
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled; compute the loss "
                               "and call backward() before scaler.step(optimizer).")
        state = self._state(optimizer)
        if state["stage"] == STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] == READY:
            self.unscale_(optimizer)
        if state["found_inf"] is None:
            raise RuntimeError("No inf checks were recorded for this optimizer: none of its parameters has a "
                               "gradient. Call scaler.scale(loss).backward() before scaler.step(optimizer).")
        result = None if state["found_inf"] else optimizer.step(*args, **kwargs)
        state["stage"] = STEPPED
        return result

    def update(self, new_scale: float | Tensor | None = None) -> None:
        """Adapt the scale once per iteration: times `backoff_factor` after a skipped step, times
        `growth_factor` after `growth_interval` steps in a row without inf/NaN; or set `new_scale`."""
        if not self._enabled:
            return
        if self._scale is None:
            raise RuntimeError("GradScaler.update: there is no scale yet; this may mean the script did not call "
                               "scaler.scale(loss) earlier in the iteration.")
        if new_scale is not None:
            value = new_scale.item() if isinstance(new_scale, Tensor) else new_scale
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TypeError(f"GradScaler.update: new_scale should be a float or a 1-element tensor, got "
                                f"{type(new_scale).__name__}")
            self._scale = np.float32(value)
        else:
            found = [s["found_inf"] for s in self._per_optimizer.values() if s["found_inf"] is not None]
            if not found:
                raise RuntimeError("No inf checks were recorded prior to update(); call scaler.step(optimizer) "
                                   "(or scaler.unscale_(optimizer)) first.")
            if any(found):
                self._scale = np.float32(self._scale * np.float32(self._backoff_factor))
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale = np.float32(self._scale * np.float32(self._growth_factor))
                    self._growth_tracker = 0
        self._per_optimizer = {}

    # ---- options and checkpoints ------------------------------------------------------
    def _state(self, optimizer: Any) -> dict[str, Any]:
        return self._per_optimizer.setdefault(id(optimizer), {"stage": READY, "found_inf": None})

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale)

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def state_dict(self) -> dict[str, Any]:
        """The scale and its schedule, as PyTorch saves them (empty when disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a `state_dict()` (kiln's or a PyTorch GradScaler's)."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        missing = {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"} - set(state_dict)
        if missing:
            raise KeyError(f"GradScaler.load_state_dict: the state dict lacks {sorted(missing)}")
        self._init_scale = float(state_dict["scale"])
        self._scale = np.float32(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
