"""Collectives whose tensors differ across ranks raise CollectiveMismatchError on every rank, naming
the ranks, shapes and dtypes, instead of reducing part of the data or mixing up the bytes.

Two ranks run scripts/collective_mismatch.py under mpiexec (skipped where MPI is missing); the
message and flag handling are also checked in-process, without MPI.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from kiln.distributed import agreement

FIX = "KILN_DIST_CHECK_COLLECTIVES=0"


@pytest.fixture(autouse=True)
def _checks_on_by_default(monkeypatch):
    """The ranks (and this process) start without the opt-out in their environment."""
    monkeypatch.delenv("KILN_DIST_CHECK_COLLECTIVES", raising=False)


def _run(mpi_launch, tmp_path, mode: str) -> list[dict]:
    proc = mpi_launch(2, "collective_mismatch.py", mode, str(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stdout
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


_CHECKED: list[list[dict]] = []


@pytest.fixture
def mismatches(mpi_launch, tmp_path):
    """What each of two ranks got from each mismatched collective (one mpiexec run serves every test)."""
    if not _CHECKED:
        _CHECKED.append(_run(mpi_launch, tmp_path, "check"))
    return _CHECKED[0]


def _raised_everywhere(results: list[dict], case: str, call: str) -> list[str]:
    messages = [r[case] for r in results]
    for rank, message in enumerate(messages):
        assert message.startswith(f"CollectiveMismatchError: kiln.distributed.{call}() on rank {rank}: "), message
        assert "Fix:" in message and FIX in message and "check_collectives=False" in message, message
    return messages


def test_a_size_mismatch_raises_on_every_rank(mismatches):
    for message in _raised_everywhere(mismatches, "size", "all_reduce"):
        assert "disagree on the shape" in message
        assert "rank 0 called all_reduce(op=sum) with dtype float32 and shape (3,)" in message
        assert "rank 1 called all_reduce(op=sum) with dtype float32 and shape (5,)" in message


def test_a_dtype_mismatch_raises_on_every_rank(mismatches):
    for message in _raised_everywhere(mismatches, "dtype", "all_reduce"):
        assert "disagree on the dtype" in message
        assert "rank 0 called all_reduce(op=sum) with dtype float32 and shape (3,)" in message
        assert "rank 1 called all_reduce(op=sum) with dtype float64 and shape (3,)" in message


@pytest.mark.parametrize("case, call, differs, rank0, rank1", [
    ("op", "all_reduce", "op", "all_reduce(op=sum) with dtype float32 and shape (3,)",
     "all_reduce(op=max) with dtype float32 and shape (3,)"),
    ("async", "all_reduce", "shape", "all_reduce(op=sum) with dtype float32 and shape (2, 3)",
     "all_reduce(op=sum) with dtype float32 and shape (2, 2)"),
    ("broadcast", "broadcast", "shape", "broadcast(src=0) with dtype float32 and shape (3,)",
     "broadcast(src=0) with dtype float32 and shape (4,)"),
    ("broadcast-src", "broadcast", "src", "broadcast(src=0)", "broadcast(src=1)"),
    ("all_gather", "all_gather", "shape", "all_gather() with dtype float32 and shape (2, 3)",
     "all_gather() with dtype float32 and shape (2, 4)"),
    ("reduce_scatter", "reduce_scatter", "dtype", "reduce_scatter(op=sum) with dtype int32",
     "reduce_scatter(op=sum) with dtype int64"),
])
def test_every_collective_checks_its_tensors(mismatches, case, call, differs, rank0, rank1):
    for message in _raised_everywhere(mismatches, case, call):
        assert f"disagree on the {differs}:" in message
        assert f"rank 0 called {rank0}" in message and f"rank 1 called {rank1}" in message


def test_ranks_in_different_collectives_raise_instead_of_hanging(mismatches):
    zero, one = mismatches[0]["other-call"], mismatches[1]["other-call"]
    assert zero.startswith("CollectiveMismatchError: kiln.distributed.all_reduce() on rank 0")
    assert one.startswith("CollectiveMismatchError: kiln.distributed.barrier() on rank 1")
    for message in (zero, one):
        assert "disagree on the collective: rank 0 called all_reduce(op=sum) with dtype float32 and shape (3,); " \
               "rank 1 called barrier()" in message


def test_matching_tensors_still_reduce_after_a_mismatch(mismatches):
    for results in mismatches:
        assert results["matching"] == "ok [0.0, 3.0, 6.0]"  # arange(3) * 1 + arange(3) * 2
        assert results["matching-gather"] == "ok [[0.0, 0.0], [1.0, 1.0]]"


@pytest.mark.parametrize("mode, checks, allgathers", [
    ("on", True, 6),          # a check before each of 5 collectives, plus all_gather's own
    ("off-env", False, 1),    # $KILN_DIST_CHECK_COLLECTIVES=0: only all_gather's own
    ("off-kwarg", False, 1),  # init_process_group(check_collectives=False)
])
def test_the_flag_turns_the_check_off(mpi_launch, tmp_path, mode, checks, allgathers):
    for results in _run(mpi_launch, tmp_path, mode):
        assert results[mode] == f"checks={checks} allgathers={allgathers} sum=[0.0, 3.0, 6.0]"


def test_ranks_that_disagree_on_the_flag_raise_at_init(mpi_launch, tmp_path):
    for results in _run(mpi_launch, tmp_path, "disagree"):
        message = results["init"]
        assert message.startswith("CollectiveMismatchError: init_process_group(): the ranks disagree on checking "
                                  "collectives: on for rank 0, off for rank 1"), message
        assert "$KILN_DIST_CHECK_COLLECTIVES" in message and "the same on every rank" in message


# ---- in-process: the message and the flag ------------------------------------------------
def test_the_message_groups_ranks_and_names_every_field():
    rows = [agreement.describe("all_reduce", np.zeros((2, 3), np.float32), op="sum") for _ in range(5)]
    rows[3] = agreement.describe("all_reduce", np.zeros((2, 3), np.float64), op="sum")
    rows[4] = agreement.describe("all_reduce", np.zeros(7, np.int64), op="sum")
    message = agreement._message("all_reduce", 1, np.stack(rows))
    assert "kiln.distributed.all_reduce() on rank 1: the ranks disagree on the dtype and shape: " in message
    assert ("ranks 0-2 called all_reduce(op=sum) with dtype float32 and shape (2, 3); rank 3 called "
            "all_reduce(op=sum) with dtype float64 and shape (2, 3); rank 4 called all_reduce(op=sum) with dtype "
            "int64 and shape (7,)") in message


def test_the_descriptor_holds_every_dimension():
    a = np.zeros((1,) * 40 + (2,), np.float32)
    b = np.zeros((1,) * 40 + (3,), np.float32)
    assert not (agreement.describe("all_gather", a) == agreement.describe("all_gather", b)).all()
    assert agreement._decode(agreement.describe("all_gather", b))["shape"] == (1,) * 40 + (3,)


def test_a_world_of_one_skips_the_check_and_reads_the_flag(world_of_one, monkeypatch):
    import kiln
    from kiln.distributed.process_group import group

    assert group().check_collectives is True
    t = kiln.ones(3)
    world_of_one.all_reduce(t)
    np.testing.assert_array_equal(t.numpy(), np.ones(3))
    world_of_one.destroy_process_group()
    monkeypatch.setenv("KILN_DIST_CHECK_COLLECTIVES", "0")
    world_of_one.init_process_group()
    assert group().check_collectives is False
    world_of_one.destroy_process_group()
    world_of_one.init_process_group(check_collectives=True)
    assert group().check_collectives is True


def test_bad_flag_values_are_refused(world_of_one, monkeypatch):
    world_of_one.destroy_process_group()
    monkeypatch.setenv("KILN_DIST_CHECK_COLLECTIVES", "maybe")
    with pytest.raises(ValueError, match=r"\$KILN_DIST_CHECK_COLLECTIVES='maybe': expected 1 .* or 0"):
        world_of_one.init_process_group()
    monkeypatch.delenv("KILN_DIST_CHECK_COLLECTIVES")
    with pytest.raises(TypeError, match=r"check_collectives=\.\.\.\) expects True, False or None, got 'no'"):
        world_of_one.init_process_group(check_collectives="no")
    assert not world_of_one.is_initialized()
    world_of_one.init_process_group()  # the fixture destroys it
