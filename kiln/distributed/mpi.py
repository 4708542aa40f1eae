"""Loading mpi4py, and knowing whether this process was started by an MPI launcher."""
from __future__ import annotations

import os
from types import ModuleType

EXTRA_HINT = 'pip install "kiln[distributed]"  (installs mpi4py and the mpich wheel, which provides mpiexec)'

# Variables that MPICH/Hydra (PMI_*), Open MPI (OMPI_*) and Slurm's PMI2 set in every launched rank.
_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE")


def launched_world_size() -> int:
    """The world size an MPI launcher announced in the environment; 1 when none did."""
    for name in _SIZE_VARIABLES:
        value = os.environ.get(name)
        if value and value.isdigit():
            return int(value)
    return 1


def load_mpi() -> ModuleType:
    """``mpi4py.MPI``, or an ImportError that names the extra to install."""
    try:
        from mpi4py import MPI  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise ImportError(
            "kiln.distributed needs mpi4py to run on more than one process, and it is not installed "
            f"({exc}). Fix: {EXTRA_HINT}"
        ) from exc
    return MPI
