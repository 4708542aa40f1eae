"""``kiln.serialization``: the names PyTorch code reaches for in ``torch.serialization``.

``save`` and ``load`` are ``kiln.save`` and ``kiln.load``. The safe-globals functions choose
which classes and functions ``kiln.load`` (``weights_only=True``, the default) may rebuild from
a pickled object, such as a whole module saved with ``kiln.save(model, f)``.

>>> kiln.serialization.add_safe_globals([MyNet, kiln.nn.Linear])
>>> with kiln.serialization.safe_globals([MyNet, kiln.nn.Linear]):
...     model = kiln.load("model.pt")
"""
from .io.safe_globals import add_safe_globals, clear_safe_globals, get_safe_globals, safe_globals
from .io.weights import load, save

__all__ = ["save", "load", "add_safe_globals", "get_safe_globals", "clear_safe_globals", "safe_globals"]
