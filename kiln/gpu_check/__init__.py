"""The prepared GPU check: ``python -m kiln.gpu_check OUT`` verifies kiln's CUDA path on a GPU.

It is built to run from a bare checkout on a machine lent for minutes (one H100 or H200,
torch with CUDA, CuPy, NumPy, pytest; nothing installable), in at most about 6 minutes:

1. `probe`: the GPU's name, memory and clocks (nvidia-smi), CuPy's and torch's versions
   and whether each sees the GPU. Without a usable GPU it stops here: it prints one
   ``no GPU: <reason>`` line, writes that into the report and exits with status 3.
2. The CUDA tests (tests/cuda, tests/devices) with pytest in one process (pytest-xdist is
   not assumed), logged with JUnit XML. Every skipped test is listed: on a GPU none should be.
3. `workloads`: the issue's benchmark targets, each timed on the GPU for kiln.compile,
   torch eager and torch.compile, with the device's copy time for the memory-bound case.
   A workload that fails is recorded with its error, and the others still run.

Everything lands in OUT: ``report.md`` (read it first), ``pytest.log``, ``junit.xml``,
``workloads.json`` and ``workloads.log``. The same code rehearses on the CPU
(``--device cpu``, tiny sizes), which the test suite runs.
"""
