"""``kiln.models``: small reference models built from ``kiln.nn``: an MLP, LeNet-5 and a GPT.

>>> model = kiln.models.gpt(vocab=65, n_layer=2, n_head=4, d_model=64, block_size=32)
"""
from .gpt import GPT, gpt
from .lenet import lenet_5
from .mlp import mlp

__all__ = ["mlp", "lenet_5", "gpt", "GPT"]
