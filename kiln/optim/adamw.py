"""AdamW: Adam with decoupled weight decay."""
from __future__ import annotations

from .adam import Adam
from .optimizer import ParamsT


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): ``p *= 1 - lr * weight_decay``
    before the Adam step, instead of adding ``weight_decay * p`` to the gradient.

    >>> opt = kiln.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    >>> opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    """

    def __init__(self, params: ParamsT, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None, fused: bool | None = None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         decoupled_weight_decay=True, foreach=foreach, fused=fused)

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True  # an AdamW always decays decoupled
