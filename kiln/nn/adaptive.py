"""AdaptiveLogSoftmaxWithLoss: a softmax over many classes, with rare classes in smaller clusters.

Every cluster is evaluated for every row and the right one is picked with `where`, so shapes never
depend on the targets: the layer traces into one compiled plan and gives the same values and
gradients as evaluating each cluster only on its own rows.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from .. import functional as F
from ..functional.checks import checked_classes
from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .container import ModuleList, Sequential
from .linear import Linear
from .module import Module


class _ASMoutput(NamedTuple):
    """`output`: each row's log-probability of its target; `loss`: the mean negative of it."""

    output: Tensor
    loss: Tensor


def _checked_cutoffs(cutoffs: Sequence[int], n_classes: int) -> list[int]:
    cutoffs = list(cutoffs)
    ok = (len(cutoffs) > 0 and all(isinstance(c, int) for c in cutoffs) and cutoffs == sorted(set(cutoffs))
          and cutoffs[0] > 0 and cutoffs[-1] <= n_classes - 1)
    if not ok:
        raise ValueError(f"AdaptiveLogSoftmaxWithLoss: cutoffs must be unique positive ints in increasing order, "
                         f"each between 1 and n_classes - 1 = {n_classes - 1}; got {cutoffs}")
    return cutoffs


class AdaptiveLogSoftmaxWithLoss(Module):
    """Log-softmax over `n_classes`: the first `cutoffs[0]` classes and one entry per cluster in a head,
    each cluster's classes in a tail projected to in_features / div_value**(i+1) dims first.

    >>> asm = kiln.nn.AdaptiveLogSoftmaxWithLoss(16, 100, cutoffs=[10, 40])
    >>> out, loss = asm(kiln.randn(8, 16), kiln.randint(0, 100, (8,)))
    """

    def __init__(self, in_features: int, n_classes: int, cutoffs: Sequence[int], div_value: float = 4.0,
                 head_bias: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        cutoffs = _checked_cutoffs(cutoffs, n_classes)
        self.in_features = in_features
        self.n_classes = n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value = div_value
        self.head_bias = head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, device=device, dtype=dtype)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hidden = int(in_features // (div_value ** (i + 1)))
            size = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hidden, bias=False, device=device, dtype=dtype),
                                        Linear(hidden, size, bias=False, device=device, dtype=dtype)))

    def reset_parameters(self) -> None:
        self.head.reset_parameters()
        for projection in self.tail:
            for layer in projection:
                layer.reset_parameters()

    def _batched(self, input: Tensor, target: Tensor | None = None) -> Tensor:  # noqa: A002
        if input.ndim not in (1, 2) or input.shape[-1] != self.in_features:
            raise ShapeError(f"AdaptiveLogSoftmaxWithLoss: expects an input of shape (N, {self.in_features}) or "
                             f"({self.in_features},), got {tuple(input.shape)}")
        rows_differ = target is not None and target.ndim and target.shape[0] != input.shape[0]
        if target is not None and (target.ndim != input.ndim - 1 or rows_differ):
            raise ShapeError(f"AdaptiveLogSoftmaxWithLoss: input of shape {tuple(input.shape)} needs a target of "
                             f"shape {tuple(input.shape[:-1])}, one class per row; got {tuple(target.shape)}")
        return input.reshape(1, -1) if input.ndim == 1 else input

    def forward(self, input: Tensor, target: Tensor) -> _ASMoutput:  # noqa: A002
        x = self._batched(input, target)
        t = checked_classes("AdaptiveLogSoftmaxWithLoss", target.reshape(-1), self.n_classes)
        head = F.log_softmax(self.head(x), 1)
        out = F.gather(head, 1, F.where(t < self.shortlist_size, t, 0).reshape(-1, 1)).reshape(-1)
        for i, projection in enumerate(self.tail):
            lo, hi = self.cutoffs[i], self.cutoffs[i + 1]
            inside = F.logical_and(t >= lo, t < hi)
            within = F.log_softmax(projection(x), 1)
            picked = F.gather(within, 1, F.where(inside, t - lo, 0).reshape(-1, 1)).reshape(-1)
            out = F.where(inside, picked + head[:, self.shortlist_size + i], out)
        out = out.reshape(()) if input.ndim == 1 else out
        return _ASMoutput(out, (-out).mean())

    def log_prob(self, input: Tensor) -> Tensor:  # noqa: A002
        """Log-probabilities of every class, shape (N, n_classes) (or (n_classes,) for one row)."""
        x = self._batched(input)
        head = F.log_softmax(self.head(x), 1)
        parts = [head[:, :self.shortlist_size]]
        for i, projection in enumerate(self.tail):
            cluster = head[:, self.shortlist_size + i:self.shortlist_size + i + 1]
            parts.append(F.log_softmax(projection(x), 1) + cluster)
        out = F.cat(parts, 1)
        return out.reshape(-1) if input.ndim == 1 else out

    def predict(self, input: Tensor) -> Tensor:  # noqa: A002
        """The most likely class of each row."""
        return F.argmax(self.log_prob(input), -1)
