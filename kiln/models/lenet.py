"""LeNet-5 for 1x32x32 images (LeCun et al., 1998), with ReLU and max pooling."""
from __future__ import annotations

from collections import OrderedDict

from .. import nn


def lenet_5(num_classes: int = 10) -> nn.Sequential:
    """LeNet-5: conv(1->6, 5x5) -> pool -> conv(6->16, 5x5) -> pool -> 400 -> 120 -> 84 -> classes.

    The modern variant: ReLU instead of tanh and 2x2 max pooling instead of the
    trainable subsampling of the paper (it trains faster and is what most references
    use). Input (N, 1, 32, 32); output logits (N, num_classes). Children are named
    (conv1, act1, pool1, conv2, act2, pool2, flatten, fc1, act3, fc2, act4, fc3), so
    state-dict keys read ``conv1.weight``, ``fc3.bias``, ...

    >>> kiln.models.lenet_5()(kiln.randn(8, 1, 32, 32)).shape
    (8, 10)
    """
    return nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(1, 6, 5)),     # 6 x 28 x 28
        ("act1", nn.ReLU()),
        ("pool1", nn.MaxPool2d(2)),        # 6 x 14 x 14
        ("conv2", nn.Conv2d(6, 16, 5)),    # 16 x 10 x 10
        ("act2", nn.ReLU()),
        ("pool2", nn.MaxPool2d(2)),        # 16 x 5 x 5
        ("flatten", nn.Flatten()),         # 400
        ("fc1", nn.Linear(400, 120)),
        ("act3", nn.ReLU()),
        ("fc2", nn.Linear(120, 84)),
        ("act4", nn.ReLU()),
        ("fc3", nn.Linear(84, num_classes)),
    ]))
