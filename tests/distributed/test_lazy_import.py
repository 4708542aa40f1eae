"""`kiln.distributed` is reachable as an attribute after `import kiln`, imported only on first use."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import sys
import kiln
assert "kiln.distributed" not in sys.modules, "import kiln imported kiln.distributed"
assert "mpi4py" not in sys.modules, "import kiln imported mpi4py"
dist = kiln.distributed
import kiln.distributed as direct
assert dist is direct
assert "mpi4py" not in sys.modules, "kiln.distributed imported mpi4py before any multi-rank use"
dist.init_process_group()
assert (dist.get_rank(), dist.get_world_size()) == (0, 1)
print("LAZY OK")
"""


def test_attribute_access_imports_distributed_lazily():
    env_clean = {k: v for k, v in os.environ.items()
                 if k not in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE")}
    env_clean["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env_clean, cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "LAZY OK" in proc.stdout, proc.stderr


def test_attribute_is_the_module_and_unknown_names_raise():
    import kiln
    import kiln.distributed

    assert kiln.distributed is sys.modules["kiln.distributed"]
    assert callable(kiln.distributed.DistributedDataParallel)
    with pytest.raises(AttributeError, match="no_such_attribute"):
        kiln.no_such_attribute  # noqa: B018
