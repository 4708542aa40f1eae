"""Sequential, ModuleList and ModuleDict: indexing, slicing, mutation, registration."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import kiln
import kiln.nn as nn


def _seq() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_sequential_runs_in_order():
    model = _seq()
    x = kiln.randn(3, 4)
    expected = model[2](model[1](model[0](x)))
    np.testing.assert_array_equal(model(x).detach().numpy(), expected.detach().numpy())


def test_sequential_indexing_len_iter():
    model = _seq()
    assert len(model) == 3
    assert isinstance(model[0], nn.Linear) and model[-1] is model[2]
    assert [type(m).__name__ for m in model] == ["Linear", "ReLU", "Linear"]
    with pytest.raises(IndexError, match="index 3 is out of range for Sequential of length 3"):
        model[3]
    with pytest.raises(TypeError, match="indices must be integers or slices"):
        model["0"]


def test_sequential_slicing_shares_modules():
    model = _seq()
    head = model[:2]
    assert isinstance(head, nn.Sequential) and len(head) == 2
    assert head[0] is model[0]
    assert list(model[1:].state_dict()) == ["2.weight", "2.bias"]  # slices keep names, like PyTorch
    assert len(model[::2]) == 2


def test_sequential_mutation():
    model = _seq()
    model.append(nn.Tanh())
    assert len(model) == 4 and isinstance(model[3], nn.Tanh)
    model[1] = nn.GELU()
    assert isinstance(model[1], nn.GELU)
    del model[1]
    assert [n for n, _ in model.named_children()] == ["0", "1", "2"]
    assert model(kiln.randn(2, 4)).shape == (2, 2)
    model.insert(0, nn.Identity())
    assert isinstance(model[0], nn.Identity) and len(model) == 4
    assert isinstance(model.pop(0), nn.Identity) and len(model) == 3
    model.extend([nn.ReLU(), nn.ReLU()])
    assert len(model) == 5
    assert len(model + nn.Sequential(nn.ReLU())) == 6
    with pytest.raises(TypeError, match="expects nn.Module instances, got int"):
        model.append(3)


def test_sequential_from_ordered_dict():
    model = nn.Sequential(OrderedDict([("fc", nn.Linear(2, 3)), ("act", nn.ReLU())]))
    assert model.fc is model[0]
    assert list(model.state_dict()) == ["fc.weight", "fc.bias"]


def test_sequential_state_dict_matches_pytorch():
    torch = pytest.importorskip("torch")
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    assert list(_seq().state_dict()) == list(theirs.state_dict())


def test_module_list():
    layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(3)])
    owner = nn.Module()
    owner.layers = layers
    assert len(list(owner.parameters())) == 6
    assert [n for n, _ in owner.named_parameters()][:2] == ["layers.0.weight", "layers.0.bias"]
    assert isinstance(layers[1:], nn.ModuleList) and len(layers[1:]) == 2
    layers.append(nn.ReLU())
    layers += [nn.Tanh()]
    assert len(layers) == 5 and isinstance(layers[-1], nn.Tanh)
    del layers[0]
    assert [n for n, _ in layers.named_children()] == ["0", "1", "2", "3"]
    layers[0] = nn.Identity()
    assert isinstance(layers[0], nn.Identity)
    with pytest.raises(NotImplementedError, match="forward"):
        layers(kiln.ones(1))


def test_module_dict():
    heads = nn.ModuleDict({"cls": nn.Linear(4, 3), "reg": nn.Linear(4, 1)})
    assert list(heads) == ["cls", "reg"] and len(heads) == 2 and "cls" in heads
    assert heads["reg"].out_features == 1
    heads["aux"] = nn.Linear(4, 2)
    assert list(heads.keys()) == ["cls", "reg", "aux"]
    assert [k for k, _ in heads.items()] == ["cls", "reg", "aux"]
    assert list(heads.state_dict())[:2] == ["cls.weight", "cls.bias"]
    assert isinstance(heads.pop("aux"), nn.Linear) and "aux" not in heads
    del heads["reg"]
    assert list(heads) == ["cls"]
    heads.update([("x", nn.ReLU())])
    assert list(heads) == ["cls", "x"]
    heads.clear()
    assert len(heads) == 0
    with pytest.raises(KeyError, match="ModuleDict has no key 'nope'"):
        heads["nope"]
