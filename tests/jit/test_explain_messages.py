"""Readable explanations: miss reasons name what changed; warnings say what happens."""
from __future__ import annotations

import warnings

import kiln
from kiln import nn


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.factor = 2.0

    def forward(self, x):
        return self.fc(x) * self.factor


def test_module_attribute_change_is_named_in_the_miss_reason():
    model = nn.Sequential(Scaled())
    f = kiln.compile(model)
    x = kiln.randn(3, 2)
    f(x)
    model[0].factor = 3.0
    f(x)
    assert "module attribute `0.factor` changed: 2.0 -> 3.0" in f.stats.miss_reasons[-1]
    assert not any("training mode" in r for r in f.stats.miss_reasons[-1])


def test_jit_module_methods_returning_the_module_keep_it_compiled():
    f = kiln.compile(Scaled())
    assert f.double() is f
    assert f.to("float32") is f
    assert f.requires_grad_(False) is f
    assert isinstance(f.state_dict(), dict)


def test_fallback_warning_says_the_signature_now_runs_eagerly():
    def branch(x):
        return x if x.sum().item() > 0 else -x

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kiln.compile(branch)(kiln.ones(2))
    text = " ".join(str(w.message) for w in caught)
    assert "now runs eagerly" in text and "fullgraph=False" not in text


def test_function_passes_are_logged_by_name():
    def my_pass(graph):
        return graph

    f = kiln.compile(lambda x: x + 1, passes=[my_pass])
    f(kiln.ones(2))
    assert "my_pass" in f.explain()
    assert "compiled an inference plan" in f.explain()
