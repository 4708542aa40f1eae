"""``kiln demo``: train a small CNN on the bundled digits and show what kiln does.

>>> from kiln.demo import DemoConfig, run_demo
>>> result = run_demo(DemoConfig(epochs=2, out="/tmp/kiln-demo"))
>>> result.test_accuracy
"""
from .artifacts import DemoError
from .train import DemoConfig, DemoResult, run_demo

__all__ = ["DemoConfig", "DemoError", "DemoResult", "run_demo"]
