"""`python -m kiln.bench ddp` runs end to end at a tiny size and reports scaling and bandwidth."""
from __future__ import annotations

import json


def test_bench_ddp_runs(mpi_launch, tmp_path, capsys):
    from kiln.bench.__main__ import main

    out = tmp_path / "ddp.json"
    assert main(["ddp", "--batch", "16", "--steps", "2", "--sizes-mb", "0.25", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1 rank x 2 threads (eager)" in text and "2 ranks x 1 thread (eager)" in text
    assert "0.25 MiB float32" in text
    payload = json.loads(out.read_text())
    assert payload["speedup"] > 0 and payload["allreduce_bus_gbs"]["0.25"] > 0
