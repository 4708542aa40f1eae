"""Helpers for the examples/ tests: import a script as a module, or run it as a user would."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def load_example(name: str) -> ModuleType:
    """examples/<name>.py as a module (its training loop sits under ``__main__`` and does not run)."""
    spec = importlib.util.spec_from_file_location(f"kiln_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_example(name: str, *args: str, cwd: Path = ROOT, check: bool = True) -> subprocess.CompletedProcess:
    """``python examples/<name>.py args...`` in a fresh process, with warnings turned into errors."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PYTHONWARNINGS": "error"}
    env.pop("KILN_DEBUG", None)
    proc = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"examples/{name}.py {' '.join(args)} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc
