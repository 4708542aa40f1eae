"""``kiln.nn.modules.<file>`` holds each kiln layer where PyTorch defines it (``torch.nn.modules.<file>``),
so scripts that import from there run unchanged."""
from __future__ import annotations

import importlib
import inspect

import pytest

import kiln
import kiln.nn as nn

torch = pytest.importorskip("torch")


def _shared_classes() -> list[tuple[str, str]]:
    """(name, PyTorch's defining module) for every kiln.nn class that torch.nn has under nn.modules."""
    pairs = []
    for name in dir(nn):
        ours, theirs = getattr(nn, name), getattr(torch.nn, name, None)
        if inspect.isclass(ours) and inspect.isclass(theirs) and theirs.__module__.startswith("torch.nn.modules."):
            pairs.append((name, theirs.__module__))
    return pairs


SHARED = _shared_classes()


def test_the_shared_classes_cover_the_common_layers():
    names = {name for name, _ in SHARED}
    assert {"Linear", "Conv2d", "ReLU", "CrossEntropyLoss", "Dropout2d", "BatchNorm2d", "LayerNorm", "MaxPool2d",
            "LSTM", "Embedding", "Sequential", "Module", "TransformerEncoderLayer", "BCELoss", "InstanceNorm2d",
            "ReflectionPad2d", "PixelShuffle", "EmbeddingBag", "PReLU", "ReLU6"} <= names


@pytest.mark.parametrize("name,where", SHARED, ids=[n for n, _ in SHARED])
def test_each_class_is_importable_where_torch_defines_it(name, where):
    sub = where.removeprefix("torch.nn.modules.")
    module = importlib.import_module(f"kiln.nn.modules.{sub}")
    assert getattr(module, name) is getattr(nn, name)
    assert getattr(nn.modules, name) is getattr(nn, name)  # torch.nn.modules re-exports them all too
    assert name in module.__all__


def test_script_style_imports():
    from kiln.nn.modules.linear import Linear
    from kiln.nn.modules.loss import _Loss, _WeightedLoss, BCELoss
    from kiln.nn.modules.module import Module
    from kiln.nn.modules.batchnorm import _BatchNorm
    from kiln.nn.modules.conv import _ConvNd
    from kiln.nn.modules.dropout import _DropoutNd
    import kiln.nn.modules.loss
    import kiln.nn.modules as modules

    assert Linear is nn.Linear and Module is nn.Module and BCELoss is nn.BCELoss
    assert kiln.nn.modules.loss.MSELoss is nn.MSELoss
    assert issubclass(nn.BCELoss, _WeightedLoss) and issubclass(nn.HuberLoss, _Loss)
    assert isinstance(nn.BatchNorm2d(3), _BatchNorm) and isinstance(nn.Conv2d(1, 1, 1), _ConvNd)
    assert isinstance(nn.Dropout(), _DropoutNd)
    assert modules.rnn.LSTM is nn.LSTM and modules.upsampling.Upsample is nn.Upsample


def test_private_bases_are_where_torch_keeps_them():
    for sub, name in [("loss", "_Loss"), ("loss", "_WeightedLoss"), ("batchnorm", "_BatchNorm"),
                      ("conv", "_ConvNd"), ("dropout", "_DropoutNd"), ("batchnorm", "_NormBase"),
                      ("instancenorm", "_InstanceNorm"), ("instancenorm", "_NormBase"), ("padding", "_ReflectionPadNd"),
                      ("padding", "_ReplicationPadNd"), ("padding", "_ConstantPadNd"), ("padding", "_CircularPadNd")]:
        assert hasattr(importlib.import_module(f"torch.nn.modules.{sub}"), name)
        assert hasattr(importlib.import_module(f"kiln.nn.modules.{sub}"), name)


def test_a_custom_loss_subclassing_the_private_base_works():
    from kiln.nn.modules.loss import _Loss

    class Scaled(_Loss):
        def forward(self, input: kiln.Tensor, target: kiln.Tensor) -> kiln.Tensor:  # noqa: A002
            return nn.functional.l1_loss(input, target, reduction=self.reduction) * 2

    assert Scaled(reduction="sum")(kiln.ones(3), kiln.zeros(3)).item() == 6.0


def test_data_parallel_is_where_torch_defines_it():
    from kiln.nn.parallel.data_parallel import DataParallel

    assert torch.nn.DataParallel.__module__ == "torch.nn.parallel.data_parallel"
    assert DataParallel is nn.DataParallel is nn.parallel.DataParallel


def test_norm_bases_follow_torch():
    from kiln.nn.modules.batchnorm import _BatchNorm, _NormBase

    assert isinstance(nn.InstanceNorm2d(3), _NormBase) and isinstance(nn.BatchNorm2d(3), _NormBase)
    assert not isinstance(nn.InstanceNorm2d(3), _BatchNorm)
