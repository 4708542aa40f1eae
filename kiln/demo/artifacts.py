"""What the demo leaves behind: the output folder, the weights file and the training plot."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import kiln


class DemoError(Exception):
    """A problem the user can fix (bad --out, ...): the CLI prints it as one line, exit code 1."""


def prepare_out_dir(path: str | os.PathLike) -> Path:
    """Create `path` if needed and prove it is writable, before any training time is spent."""
    out = Path(path).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".kiln-write-test-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise DemoError(f"--out {str(path)!r} is not a writable directory ({reason}); "
                        "pass --out with a folder you can write to") from None
    return out


def save_weights(state: dict[str, Any], out: Path) -> tuple[Path, str]:
    """Save a state_dict with kiln.save (safetensors) if it exists, else NumPy .npz; returns (path, note)."""
    try:
        if hasattr(kiln, "save"):
            path = out / "weights.safetensors"
            kiln.save(state, str(path))
            return path, "safetensors via kiln.save"
        path = out / "weights.npz"
        np.savez(path, **{name: np.asarray(t.detach()) for name, t in state.items()})
        return path, "NumPy .npz: kiln.save is not available yet; load with numpy.load"
    except OSError as exc:
        raise DemoError(f"cannot save weights in {out}: {exc.strerror or exc}") from None


def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def save_plot(history: dict[str, list[float]], out: Path) -> Path | None:
    """A PNG of the loss per step and the test accuracy per epoch; None without matplotlib."""
    if not matplotlib_available():
        return None
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    steps_per_epoch = max(1, len(history["loss"]) // max(1, len(history["test_acc"])))
    ax_loss.plot(np.arange(len(history["loss"])) / steps_per_epoch, history["loss"], lw=0.8)
    ax_loss.set(xlabel="epoch", ylabel="training loss", yscale="log", title="loss")
    epochs = np.arange(1, len(history["test_acc"]) + 1)
    ax_acc.plot(epochs, [100 * a for a in history["test_acc"]], marker="o")
    ax_acc.axhline(97, color="gray", ls="--", lw=0.8)
    ax_acc.set(xlabel="epoch", ylabel="test accuracy (%)", title="test accuracy")
    fig.suptitle("kiln demo: CNN on the UCI handwritten digits")
    fig.tight_layout()
    path = out / "training.png"
    try:
        fig.savefig(path, dpi=100)
    except OSError as exc:
        raise DemoError(f"cannot save the plot in {out}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return path
