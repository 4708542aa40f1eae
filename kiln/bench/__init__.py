"""Benchmarks that live with the package: ``python -m kiln.bench <workload>``.

Each workload is one module with `NAME`, `DESCRIPTION`, `add_arguments(parser)` and
`run(args) -> exit code`. Workloads time kiln side by side with peer libraries
(PyTorch when importable), report medians and kiln/peer ratios, and can write JSON.

    python -m kiln.bench                    # list the workloads
    python -m kiln.bench eager-overhead --json results.json
    python -m kiln.bench --peers            # the `targets` workload: kiln.compile vs its targets
"""
from __future__ import annotations

from types import ModuleType

from . import compiled, ddp, dynamic_shapes, eager_overhead, projects, real_sizes, targets, whole_step

WORKLOADS: dict[str, ModuleType] = {module.NAME: module for module in (eager_overhead, compiled, targets,
                                                                       whole_step, ddp, projects, real_sizes,
                                                                       dynamic_shapes)}

__all__ = ["WORKLOADS"]
