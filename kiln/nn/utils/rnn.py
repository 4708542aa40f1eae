"""Variable-length batches for recurrent layers: PackedSequence, packing, padding.

A packed sequence stores a batch of sequences time step by time step, with only the
sequences still running at each step: `data` is (sum of lengths, *) and
`batch_sizes[t]` says how many rows step t has. The sequences are ordered longest
first; `sorted_indices` and `unsorted_indices` map to and from the caller's order.

>>> x = kiln.randn(5, 3, 8)                        # (T, B, features), time first
>>> packed = pack_padded_sequence(x, [5, 2, 3], enforce_sorted=False)
>>> out, h = kiln.nn.GRU(8, 16)(packed)
>>> padded, lengths = pad_packed_sequence(out)     # (5, 3, 16) and tensor([5, 2, 3])

Under ``kiln.compile``, pass the lengths as Python ints (a list): a plan is then made per
packing, like per shape. Lengths given as a tensor are tensor data that decides shapes,
so a compiled function reading them falls back to eager for that call signature, with a warning.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Sequence

import numpy as np

from ...functional.creation import arange, full, zeros
from ...functional.shape import cat, index_select, narrow, pad, reshape, scatter_add, stack, transpose
from ...ops.primitive import ShapeError
from ...tensor import Tensor, tensor


@dataclasses.dataclass(init=False, eq=False, repr=False)
class PackedSequence:
    """A batch of sequences packed time step by time step (see the module docstring).

    As in PyTorch it has `data`, `batch_sizes` (an int64 tensor), `sorted_indices` and
    `unsorted_indices`, and unpacks like a 4-tuple. The step sizes are also kept as
    Python ints (`sizes`), because they fix the shapes of everything computed from the
    packing: ``kiln.compile`` keys a plan on them, as on a shape, instead of reading a
    tensor's values. Build one with `pack_padded_sequence` or `pack_sequence`.
    """

    data: Tensor
    sizes: tuple[int, ...]
    sorted_indices: Tensor | None
    unsorted_indices: Tensor | None

    def __init__(self, data: Tensor, batch_sizes: Any = None, sorted_indices: Tensor | None = None,
                 unsorted_indices: Tensor | None = None, *, sizes: Sequence[int] | None = None) -> None:
        if not isinstance(data, Tensor):
            raise TypeError(f"PackedSequence: data must be a kiln tensor, got {type(data).__name__}")
        if sizes is None:
            if batch_sizes is None:
                raise TypeError("PackedSequence: batch_sizes is required; build packed sequences with "
                                "pack_padded_sequence or pack_sequence")
            sizes = _int_list(batch_sizes, "PackedSequence: batch_sizes")
        sizes = tuple(sizes)
        if not sizes or any(a < b for a, b in zip(sizes, sizes[1:])) or sizes[-1] <= 0:
            raise ValueError(f"PackedSequence: batch_sizes must be positive and non-increasing, got {list(sizes)}")
        if data.ndim < 1 or data.shape[0] != sum(sizes):
            raise ShapeError(f"PackedSequence: data has {data.shape[0] if data.ndim else 0} rows but batch_sizes "
                             f"{list(sizes)} add up to {sum(sizes)}")
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = invert_permutation(sorted_indices)
        self.data = data
        self.sizes = sizes
        self.sorted_indices = sorted_indices
        self.unsorted_indices = unsorted_indices

    @property
    def batch_sizes(self) -> Tensor:
        """The number of sequences still running at each time step (int64, longest first)."""
        return tensor(np.asarray(self.sizes, dtype=np.int64))

    def __iter__(self) -> Iterator[Any]:
        return iter((self.data, self.batch_sizes, self.sorted_indices, self.unsorted_indices))

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> Any:
        return tuple(self)[i]

    def __repr__(self) -> str:
        return (f"PackedSequence(data={self.data!r}, batch_sizes={list(self.sizes)}, "
                f"sorted_indices={self.sorted_indices!r}, unsorted_indices={self.unsorted_indices!r})")

    def _with_data(self, data: Tensor) -> PackedSequence:
        return PackedSequence(data, sorted_indices=self.sorted_indices, unsorted_indices=self.unsorted_indices,
                              sizes=self.sizes)

    def to(self, *args: Any, **kwargs: Any) -> PackedSequence:
        """The same packing with `data` converted (dtype or device) by ``Tensor.to``."""
        return self._with_data(self.data.to(*args, **kwargs))

    def float(self) -> PackedSequence:  # noqa: A003
        return self.to("float32")

    def double(self) -> PackedSequence:
        return self.to("float64")

    def cpu(self) -> PackedSequence:
        return self.to("cpu")

    @property
    def is_cuda(self) -> bool:
        return self.data.device.type == "cuda"


def _int_list(values: Any, what: str) -> list[int]:
    """Python ints from a list, tuple, NumPy array or integer tensor."""
    if isinstance(values, Tensor):
        if values.dtype.is_floating_point:
            raise TypeError(f"{what} must hold integers, got a {values.dtype.name} tensor")
        return [int(v) for v in values.reshape(-1).tolist()]
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise TypeError(f"{what} must hold integers, got {values!r}")
    return [int(v) for v in arr.reshape(-1)]


def _index(values: Sequence[int], like: Tensor) -> Tensor:
    return tensor(np.asarray(values, dtype=np.int64), device=like.device)


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    """The inverse of a permutation of 0..n-1 (None stays None), computed with tensor ops."""
    if permutation is None:
        return None
    n = int(permutation.shape[0])
    positions = arange(n, dtype="int64", device=permutation.device)
    return scatter_add(zeros(n, dtype="int64", device=permutation.device), 0, permutation, positions)


def pack_padded_sequence(input: Tensor, lengths: Any, batch_first: bool = False,  # noqa: A002
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded (T, B, *) batch (or (B, T, *) with `batch_first`) of sequences of `lengths`.

    With ``enforce_sorted=True`` the lengths must not increase along the batch (the
    longest sequence first); ``enforce_sorted=False`` sorts them and records the order.
    """
    if input.ndim < 2:
        raise ShapeError(f"pack_padded_sequence: expected an input with at least 2 dims (T, B, *), got "
                         f"shape {tuple(input.shape)}")
    x = transpose(input, 0, 1) if batch_first else input
    steps, batch = int(x.shape[0]), int(x.shape[1])
    lens = _int_list(lengths, "pack_padded_sequence: lengths")
    if len(lens) != batch:
        raise ShapeError(f"pack_padded_sequence: got {len(lens)} lengths for a batch of {batch} sequences "
                         f"(input shape {tuple(input.shape)}, batch_first={batch_first}); pass one length "
                         f"per sequence")
    if any(n <= 0 for n in lens):
        raise ValueError(f"pack_padded_sequence: every length must be at least 1, got {lens}; drop the "
                         f"empty sequences from the batch")
    if max(lens) > steps:
        raise ValueError(f"pack_padded_sequence: a length of {max(lens)} exceeds the {steps} time steps of "
                         f"the input (shape {tuple(input.shape)}, batch_first={batch_first})")
    if enforce_sorted:
        if any(a < b for a, b in zip(lens, lens[1:])):
            raise RuntimeError(f"pack_padded_sequence: lengths must be sorted in decreasing order when "
                               f"enforce_sorted=True, got {lens}; sort the batch by length or pass "
                               f"enforce_sorted=False")
        order = list(range(batch))
        sorted_indices = unsorted_indices = None
    else:
        order = [int(i) for i in np.argsort(-np.asarray(lens), kind="stable")]
        sorted_indices = _index(order, input)
        unsorted_indices = _index(np.argsort(order), input)
    sorted_lens = [lens[i] for i in order]
    batch_sizes = [sum(1 for n in sorted_lens if n > t) for t in range(sorted_lens[0])]
    rows = [t * batch + order[b] for t, size in enumerate(batch_sizes) for b in range(size)]
    flat = reshape(x, (steps * batch,) + tuple(x.shape[2:]))
    data = index_select(flat, 0, _index(rows, input))
    return PackedSequence(data, sorted_indices=sorted_indices, unsorted_indices=unsorted_indices, sizes=batch_sizes)


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple[Tensor, Tensor]:
    """Undo `pack_padded_sequence`: (padded (T, B, *) in the original batch order, lengths).

    `total_length` pads the time dim to that many steps (at least the longest length).
    """
    if not isinstance(sequence, PackedSequence):
        raise TypeError(f"pad_packed_sequence expects a PackedSequence, got {type(sequence).__name__}; "
                        f"build one with pack_padded_sequence or pack_sequence")
    data = sequence.data
    sizes = sequence.sizes
    steps, batch = len(sizes), sizes[0]
    if total_length is not None:
        if total_length < steps:
            raise ValueError(f"pad_packed_sequence: total_length={total_length} is shorter than the longest "
                             f"sequence ({steps} steps); pass total_length >= {steps} or None")
        steps_out = int(total_length)
    else:
        steps_out = steps
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + size)
    pad_row = offsets[-1]  # the index of the padding row appended below
    rows = [offsets[t] + b if t < steps and b < sizes[t] else pad_row for t in range(steps_out) for b in range(batch)]
    filler = full((1,) + tuple(data.shape[1:]), padding_value, dtype=data.dtype, device=data.device)
    padded = index_select(cat([data, filler]), 0, _index(rows, data))
    padded = reshape(padded, (steps_out, batch) + tuple(data.shape[1:]))
    lengths = _index([sum(1 for s in sizes if s > b) for b in range(batch)], data)
    if sequence.unsorted_indices is not None:  # back to the caller's batch order
        padded = index_select(padded, 1, sequence.unsorted_indices)
        lengths = index_select(lengths, 0, sequence.unsorted_indices)
    return (transpose(padded, 0, 1) if batch_first else padded), lengths


def pad_sequence(sequences: Sequence[Tensor], batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack (L_i, *) tensors into (max L, B, *) (or (B, max L, *)), padding with `padding_value`."""
    if isinstance(sequences, Tensor):
        sequences = list(sequences.unbind(0))
    sequences = list(sequences)
    if not sequences:
        raise ValueError("pad_sequence: expected a non-empty list of tensors")
    if padding_side not in ("right", "left"):
        raise ValueError(f"pad_sequence: padding_side must be 'right' or 'left', got {padding_side!r}")
    for s in sequences:
        if not isinstance(s, Tensor):
            raise TypeError(f"pad_sequence: expected kiln tensors, got {type(s).__name__}")
        if s.ndim < 1 or tuple(s.shape[1:]) != tuple(sequences[0].shape[1:]):
            raise ShapeError(f"pad_sequence: every sequence must be (L, *) with the same trailing dims, got "
                             f"shapes {[tuple(q.shape) for q in sequences]}")
    longest = max(int(s.shape[0]) for s in sequences)
    rest = [0, 0] * (sequences[0].ndim - 1)
    padded = []
    for s in sequences:
        missing = longest - int(s.shape[0])
        pads = rest + ([0, missing] if padding_side == "right" else [missing, 0])
        padded.append(pad(s, pads, value=padding_value) if missing else s)
    return stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths: Any, batch_first: bool = False) -> list[Tensor]:
    """Split a padded batch back into its sequences, each (L_i, *)."""
    x = padded_sequences if batch_first else transpose(padded_sequences, 0, 1)
    lens = _int_list(lengths, "unpad_sequence: lengths")
    if len(lens) != x.shape[0]:
        raise ShapeError(f"unpad_sequence: got {len(lens)} lengths for a batch of {x.shape[0]}")
    return [narrow(x[b], 0, 0, n) for b, n in enumerate(lens)]


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of (L_i, *) tensors (longest first unless ``enforce_sorted=False``)."""
    lengths = [int(s.shape[0]) for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The list of (L_i, *) tensors that `pack_sequence` packed, in their original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
