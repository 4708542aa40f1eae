"""Several ranks under mpiexec: trajectory equality with single-process training, collectives, faults."""
from __future__ import annotations

import json
import time

import pytest


def _result(proc) -> dict:
    assert proc.returncode == 0, proc.stdout
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0][len("RESULT "):])


def _check_trajectory(result: dict) -> None:
    for case, value in result.items():
        if case.endswith("-decreased"):
            assert value is True, f"{case}: the loss did not go down"
        elif case.endswith("-cache-hits"):
            assert value >= 18, f"{case}: the compiled module was not replayed ({value} hits)"
        else:
            assert value < 1e-5, f"{case}: DDP losses differ from single-process full-batch training by {value:.3g}"


def test_trajectory_two_ranks_all_cases(mpi_launch):
    """MLP and GPT, SGD-momentum and AdamW, eager and compiled, and no_sync accumulation, 20 steps."""
    result = _result(mpi_launch(2, "trajectory.py", "20"))
    assert {"mlp-sgd-eager", "gpt-adamw-compiled", "mlp-sgd-nosync", "gpt-adamw-nosync"} <= set(result)
    assert len([k for k in result if k.count("-") == 2]) == 10
    _check_trajectory(result)


def test_trajectory_four_ranks_all_cases(mpi_launch):
    """The same ten cases on four ranks (each rank holds a quarter of each global batch)."""
    result = _result(mpi_launch(4, "trajectory.py", "20", timeout=180))
    assert len([k for k in result if k.count("-") == 2]) == 10
    _check_trajectory(result)


def test_collectives_three_ranks(mpi_launch):
    proc = mpi_launch(3, "collectives.py")
    assert proc.returncode == 0 and "COLLECTIVES OK" in proc.stdout, proc.stdout


def test_a_raising_rank_stops_every_rank(mpi_launch):
    start = time.monotonic()
    proc = mpi_launch(2, "faults.py", "raise", timeout=30)
    assert time.monotonic() - start < 20
    assert proc.returncode != 0
    assert "reached the end" not in proc.stdout
    assert "rank 1 of 2 failed with ValueError: rank one fails on purpose" in proc.stdout
    assert "kiln.distributed.run: rank 1: failed: ValueError: rank one fails on purpose" in proc.stdout
    assert "kiln.distributed.run: rank 0: stopped: aborted because rank 1 failed" in proc.stdout


def test_a_collective_times_out(mpi_launch):
    start = time.monotonic()
    proc = mpi_launch(2, "faults.py", "timeout", timeout=30)
    assert time.monotonic() - start < 20, "the 2 s collective timeout did not end the job"
    assert proc.returncode != 0
    assert "DistTimeoutError" in proc.stdout and "did not complete within 2 s" in proc.stdout, proc.stdout
    assert "kiln.distributed.run: rank 0: failed: DistTimeoutError" in proc.stdout


def test_models_that_differ_across_ranks_raise(mpi_launch):
    proc = mpi_launch(2, "faults.py", "mismatch", timeout=30)
    assert proc.returncode != 0
    assert "reached the end" not in proc.stdout
    assert ("the model on rank 1 differs from rank 0's: parameter '0.weight' has shape (8, 4) on rank 0 "
            "but (9, 4) on rank 1") in proc.stdout, proc.stdout


@pytest.mark.parametrize("args", [["-n", "0"], ["-n", "2", "--hostfile", "/nonexistent/hosts"]])
def test_launcher_rejects_bad_arguments(args, tmp_path, capsys):
    from kiln.distributed.run import main

    script = tmp_path / "s.py"
    script.write_text("")
    assert main([*args, str(script)]) == 2
    err = capsys.readouterr().err
    assert "-n must be at least 1" in err or "hostfile '/nonexistent/hosts' does not exist" in err


def test_a_failing_rank_waits_until_its_output_was_read():
    """Abort tears the job down at once, so the error message must have left the pipe before it."""
    import os
    import threading

    from kiln.distributed.faults import _unread_bytes, drain_output

    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, b"kiln.distributed: rank 1 of 2 failed\n")
        assert _unread_bytes(write_fd) > 0
        drain_output(0.05, fds=(write_fd,))  # nobody reads: it gives up after the limit
        assert _unread_bytes(write_fd) > 0
        got: list[bytes] = []
        reader = threading.Timer(0.2, lambda: got.append(os.read(read_fd, 1024)))
        reader.start()
        drain_output(30, fds=(write_fd,))
        assert _unread_bytes(write_fd) == 0  # it returned once the reader had taken everything
        reader.join()
        assert got == [b"kiln.distributed: rank 1 of 2 failed\n"]
    finally:
        os.close(read_fd)
        os.close(write_fd)
