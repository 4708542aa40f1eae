"""nn.utils.rnn (pack_padded_sequence, pad_packed_sequence, pad_sequence, ...) against torch.nn.utils.rnn."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.nn.utils import rnn
from nn_parity import assert_close
from rnn_parity import randn, to_both

torch = pytest.importorskip("torch")
trnn = torch.nn.utils.rnn

LENGTHS = {"sorted": [5, 4, 4, 2], "unsorted": [2, 5, 1, 4], "ties": [3, 5, 3, 3]}


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("lengths", sorted(LENGTHS))
def test_pack_matches_torch(lengths, batch_first):
    lens = LENGTHS[lengths]
    enforce = lengths == "sorted"
    x = randn(4, 5, 3) if batch_first else randn(5, 4, 3)
    kx, tx = to_both(x, "float64")
    kp = rnn.pack_padded_sequence(kx, lens, batch_first=batch_first, enforce_sorted=enforce)
    tp = trnn.pack_padded_sequence(tx, lens, batch_first=batch_first, enforce_sorted=enforce)
    assert kp.batch_sizes.tolist() == tp.batch_sizes.tolist()
    assert kp.batch_sizes.dtype == kiln.int64
    if enforce:
        assert kp.sorted_indices is None and kp.unsorted_indices is None
    else:
        # torch's descending sort is not stable on ties; any order of equal lengths is a valid packing
        k_sorted, t_sorted = kp.sorted_indices.tolist(), tp.sorted_indices.tolist()
        assert [lens[i] for i in k_sorted] == [lens[i] for i in t_sorted]
        assert sorted(k_sorted) == list(range(4))
        assert [k_sorted[i] for i in kp.unsorted_indices.tolist()] == list(range(4))
        if lengths == "unsorted":
            assert k_sorted == t_sorted
            assert kp.unsorted_indices.tolist() == tp.unsorted_indices.tolist()
    if lengths != "ties":
        assert_close(kp.data, tp.data, "float64")
    # the round trip restores the padded batch (padding zeroed) and the lengths, in the caller's order
    padded, k_lens = rnn.pad_packed_sequence(kp, batch_first=batch_first, padding_value=-1.0)
    t_padded, t_lens = trnn.pad_packed_sequence(tp, batch_first=batch_first, padding_value=-1.0)
    assert k_lens.tolist() == t_lens.tolist() == lens
    assert_close(padded, t_padded, "float64")
    u = randn(*padded.shape, seed=1)
    (padded * kiln.tensor(u)).sum().backward()
    (t_padded * torch.tensor(u)).sum().backward()
    assert_close(kx.grad, tx.grad, "float64", "grad")


def test_pad_packed_total_length():
    kx, tx = to_both(randn(4, 3, 2), "float64")
    kp = rnn.pack_padded_sequence(kx, [4, 2, 1])
    tp = trnn.pack_padded_sequence(tx, [4, 2, 1])
    got, _ = rnn.pad_packed_sequence(kp, total_length=6)
    want, _ = trnn.pad_packed_sequence(tp, total_length=6)
    assert tuple(got.shape) == (6, 3, 2)
    assert_close(got, want, "float64")
    with pytest.raises(ValueError, match="total_length=3 is shorter"):
        rnn.pad_packed_sequence(kp, total_length=3)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_sequence_matches_torch(batch_first, padding_side):
    seqs = [randn(3, 2), randn(5, 2, seed=1), randn(1, 2, seed=2)]
    k_seqs = [kiln.tensor(s, requires_grad=True) for s in seqs]
    t_seqs = [torch.tensor(s, requires_grad=True) for s in seqs]
    got = rnn.pad_sequence(k_seqs, batch_first=batch_first, padding_value=0.5, padding_side=padding_side)
    want = trnn.pad_sequence(t_seqs, batch_first=batch_first, padding_value=0.5, padding_side=padding_side)
    assert_close(got, want, "float64")
    u = randn(*got.shape, seed=3)
    (got * kiln.tensor(u)).sum().backward()
    (want * torch.tensor(u)).sum().backward()
    for k, t in zip(k_seqs, t_seqs):
        assert_close(k.grad, t.grad, "float64", "grad")


@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_pack_sequence_and_unpack(enforce_sorted):
    lens = [4, 3, 1] if enforce_sorted else [1, 4, 3]
    seqs = [randn(n, 2, seed=n) for n in lens]
    kp = rnn.pack_sequence([kiln.tensor(s) for s in seqs], enforce_sorted=enforce_sorted)
    tp = trnn.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted=enforce_sorted)
    assert_close(kp.data, tp.data, "float64")
    assert kp.batch_sizes.tolist() == tp.batch_sizes.tolist()
    for got, want in zip(rnn.unpack_sequence(kp), seqs):
        np.testing.assert_array_equal(got.numpy(), want)


def test_unpad_sequence():
    padded = kiln.tensor(randn(3, 4, 2))  # (B, T, *)
    parts = rnn.unpad_sequence(padded, kiln.tensor([4, 1, 2]), batch_first=True)
    assert [tuple(p.shape) for p in parts] == [(4, 2), (1, 2), (2, 2)]
    np.testing.assert_array_equal(parts[2].numpy(), padded.numpy()[2, :2])


def test_packed_sequence_behaves_like_torchs_tuple():
    kp = rnn.pack_padded_sequence(kiln.randn(3, 2, 4), [3, 1])
    data, batch_sizes, sorted_indices, unsorted_indices = kp
    assert data is kp.data and batch_sizes.tolist() == [2, 1, 1]
    assert sorted_indices is None and unsorted_indices is None
    assert len(kp) == 4 and kp[0] is kp.data
    assert kp.to("float64").data.dtype == kiln.float64 and kp.double().sizes == kp.sizes
    assert not kp.is_cuda
    # built by hand from a tensor of batch sizes; the inverse permutation is derived
    manual = rnn.PackedSequence(kp.data, kiln.tensor([2, 1, 1]), kiln.tensor([1, 0]))
    assert manual.sizes == (2, 1, 1) and manual.unsorted_indices.tolist() == [1, 0]


def test_packing_errors():
    x = kiln.randn(4, 3, 2)
    with pytest.raises(RuntimeError, match="sorted in decreasing order .* enforce_sorted=False"):
        rnn.pack_padded_sequence(x, [2, 4, 1])
    with pytest.raises(ValueError, match="at least 1"):
        rnn.pack_padded_sequence(x, [4, 0, 0])
    with pytest.raises(ValueError, match="exceeds the 4 time steps"):
        rnn.pack_padded_sequence(x, [5, 2, 1])
    with pytest.raises(kiln.ShapeError, match="2 lengths for a batch of 3"):
        rnn.pack_padded_sequence(x, [4, 2])
    with pytest.raises(TypeError, match="integers"):
        rnn.pack_padded_sequence(x, [4.0, 2.0, 1.0])
    with pytest.raises(TypeError, match="expects a PackedSequence"):
        rnn.pad_packed_sequence(x)
    with pytest.raises(ValueError, match="non-increasing"):
        rnn.PackedSequence(kiln.randn(4, 2), [1, 3])
    with pytest.raises(kiln.ShapeError, match="pad_sequence"):
        rnn.pad_sequence([kiln.randn(3, 2), kiln.randn(2, 3)])


def test_lengths_may_be_a_tensor():
    kp = rnn.pack_padded_sequence(kiln.randn(4, 3, 2), kiln.tensor([1, 4, 2]), enforce_sorted=False)
    assert kp.sizes == (3, 2, 1, 1)
