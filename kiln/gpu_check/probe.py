"""What the machine has: the GPU (nvidia-smi), CuPy and torch, or why there is no usable GPU."""
from __future__ import annotations

import platform
import shutil
import subprocess
from dataclasses import dataclass, field

_SMI_FIELDS = ("name", "memory.total", "driver_version", "clocks.max.sm", "clocks.max.mem", "clocks.sm",
               "compute_cap")


@dataclass
class Machine:
    """The facts the report starts with; `no_gpu` is the reason a GPU run is impossible ("" when it is possible)."""

    no_gpu: str
    facts: dict[str, str] = field(default_factory=dict)


def probe() -> Machine:
    """The machine's GPU facts, or the reason (CuPy missing, no device, no driver) there is no GPU to check."""
    facts = {"python": platform.python_version(), "platform": platform.platform()}
    facts.update(_nvidia_smi())
    facts.update(_torch())
    reason = ""
    try:
        import cupy  # noqa: PLC0415
    except ImportError:
        reason = "CuPy is not installed (pip install cupy-cuda12x or cupy-cuda13x, whichever matches the driver)"
    else:
        facts["cupy"] = cupy.__version__
        try:
            count = int(cupy.cuda.runtime.getDeviceCount())
            facts["cupy devices"] = str(count)
            facts["cuda runtime"] = str(cupy.cuda.runtime.runtimeGetVersion())
            facts["cuda driver"] = str(cupy.cuda.runtime.driverGetVersion())
            if not count:
                reason = f"CuPy {cupy.__version__} sees no GPU"
        except Exception as exc:  # noqa: BLE001 - no driver, no device, too old a driver: all mean no GPU
            reason = f"CuPy {cupy.__version__} found no usable GPU ({exc})"
    if not reason:
        import kiln  # noqa: PLC0415

        if not kiln.cuda.is_available():
            reason = "CuPy sees a GPU but kiln.cuda.is_available() is False"
    return Machine(reason, facts)


def _nvidia_smi() -> dict[str, str]:
    if shutil.which("nvidia-smi") is None:
        return {"nvidia-smi": "not found"}
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"nvidia-smi": f"failed: {exc}"}
    line = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
    values = [v.strip() for v in line.split(",")]
    if len(values) != len(_SMI_FIELDS):
        return {"nvidia-smi": (out.stdout + out.stderr).strip()[:300] or f"exit status {out.returncode}"}
    return {f"gpu {name}": value for name, value in zip(_SMI_FIELDS, values)}


def _torch() -> dict[str, str]:
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return {"torch": "not installed"}
    facts = {"torch": torch.__version__, "torch cuda": str(torch.version.cuda)}
    facts["torch sees a GPU"] = str(bool(torch.cuda.is_available()))
    return facts
