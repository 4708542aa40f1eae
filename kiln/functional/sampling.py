"""Sampling category indices: ``kiln.multinomial``, drawing from kiln's counter-based stream.

The same seed gives the same samples, eager or compiled (``kiln.manual_seed``, or a
``kiln.Generator`` passed as `generator`), and each call draws new ones.

>>> probs = kiln.softmax(logits[:, -1, :], dim=-1)
>>> next_token = kiln.multinomial(probs, num_samples=1)        # (B, 1) int64
"""
from __future__ import annotations

from typing import Any

from ..ops.multinomial import multinomial_count
from ..ops.primitive import REGISTRY, bind
from ..random import Generator
from ..tensor import Tensor
from .checks import int_arg
from .creation import _key

_P = REGISTRY


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *,  # noqa: A002
                generator: Generator | None = None) -> Tensor:
    """`num_samples` category indices (int64) per row of the weights `input`.

    `input` is 1-D (one distribution) or 2-D (one per row) of finite non-negative floats;
    rows need not sum to 1. Without `replacement` a row yields distinct categories, so it
    needs at least `num_samples` positive weights. Bad weights raise
    ``kiln.ops.multinomial.MultinomialWeightsError`` (a ValueError) when the draw runs.

    >>> kiln.manual_seed(0)
    >>> kiln.multinomial(kiln.tensor([0.1, 0.0, 0.9]), 4, replacement=True)
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"multinomial(): input must be a kiln.Tensor of weights, got {type(input).__name__}")
    if not input.is_floating_point():
        raise TypeError(f"multinomial(): input must hold floating point weights, got {input.dtype.name}; "
                        "convert with .float()")
    if input.ndim not in (1, 2):
        raise ValueError(f"multinomial(): input must be 1-D or 2-D, got shape {tuple(input.shape)}")
    num_samples = int_arg("multinomial", "num_samples", num_samples)
    categories = input.shape[-1]
    if num_samples <= 0:
        raise ValueError(f"multinomial(): num_samples must be positive, got {num_samples}")
    if categories == 0:
        raise ValueError("multinomial(): input has no categories (its last dim has size 0)")
    if not replacement and num_samples > categories:
        raise ValueError(f"multinomial(): cannot draw {num_samples} samples without replacement from "
                         f"{categories} categories; pass replacement=True or draw at most {categories}")
    rows = input.shape[0] if input.ndim == 2 else 1
    count = multinomial_count(rows, categories, num_samples, bool(replacement))
    key = _key(generator, count, input.device)
    return bind(_P["multinomial"], (input, key), {"num_samples": num_samples, "replacement": bool(replacement)})
