"""The ``kiln`` command line: ``demo``, ``bench``, ``info`` and ``cache``.

    python -m kiln demo [--epochs N] [--eager] [--backend NAME] [--out DIR] [--ranks N]
    python -m kiln bench [WORKLOAD ...]      # same as python -m kiln.bench
    python -m kiln info                      # versions, C compiler, kernel cache, devices
    python -m kiln cache [info|clear]        # show the kernel cache, or remove kiln's kernels from it

Usage errors (unknown flags, bad values) print the usage and exit 2; problems
the user can fix, such as an unwritable ``--out``, print one line and exit 1.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

C_COMPILERS = ("cc", "gcc", "clang")
DEMO_EPOCHS = 15  # kiln.demo.DemoConfig's default; kept here so `kiln --help` does not import kiln
OPTIONAL_PACKAGES = ("torch", "jax", "tqdm", "matplotlib", "safetensors", "onnx", "onnxruntime", "cupy-cuda12x")


# ---- helpers shared by the subcommands ----------------------------------------------
def kernel_cache_dir() -> Path:
    """kiln's cache folder, $KILN_CACHE_DIR or ~/.cache/kiln; compiled kernels live in its kernels/."""
    configured = os.environ.get("KILN_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "kiln"


def dir_usage(path: Path) -> tuple[int, int]:
    """(number of files, total bytes) under `path`; (0, 0) when it does not exist."""
    files = size = 0
    if not path.is_dir():
        return 0, 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                size += (Path(root) / name).lstat().st_size
                files += 1
            except OSError:
                continue
    return files, size


def human_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def package_version(name: str) -> str | None:
    """The installed version of distribution `name`, without importing it (None if absent)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def find_c_compiler() -> tuple[str, str] | None:
    """(path, first line of --version) of the first of cc/gcc/clang on PATH, or None."""
    for name in C_COMPILERS:
        path = shutil.which(name)
        if path is None:
            continue
        try:
            proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
            first = (proc.stdout or proc.stderr).strip().splitlines()
            return path, first[0] if first else "version unknown"
        except (OSError, subprocess.SubprocessError):
            return path, "version unknown"
    return None


class CLIError(Exception):
    """An error the user can fix: printed as ``kiln <command>: error: <message>``, exit code 1."""


# ---- subcommands ------------------------------------------------------------------
def cmd_info(args: argparse.Namespace) -> int:
    """Print versions, the C compiler, the CPU's and the kernels' SIMD levels, the kernel cache and the devices."""
    import numpy as np  # noqa: PLC0415

    import kiln  # noqa: PLC0415
    from kiln.bench.threads import available_cpus, numpy_blas_threads  # noqa: PLC0415
    from kiln.jit.backends.cpu import simd  # noqa: PLC0415

    print(f"kiln {kiln.__version__} ({Path(kiln.__file__).parent})")
    print(f"python {platform.python_version()} ({sys.executable})")
    print(f"numpy {np.__version__} (BLAS threads: {numpy_blas_threads()})")
    optional = {name: package_version(name) for name in OPTIONAL_PACKAGES}
    print("optional: " + ", ".join(f"{n} {v}" if v else f"{n} (not installed)" for n, v in optional.items()))
    compiler = find_c_compiler()
    if compiler:
        print(f"C compiler: {compiler[0]} ({compiler[1]})")
    else:
        print(f"C compiler: none found (looked for {', '.join(C_COMPILERS)} on PATH)")
    print(f"cpu: {simd.describe()}")
    source = "$KILN_CACHE_DIR" if os.environ.get("KILN_CACHE_DIR") else "default"
    cache = kernel_cache_dir()
    print(f"kernel cache: {cache / 'kernels'} ({source}; {describe_kernel_cache(cache)})")
    builds = ("the C compiler runs in the background ($KILN_BACKGROUND_BUILDS=0 builds before the first replay)"
              if kiln.jit.background_builds() else "code builds before each plan's first replay")
    print(f"kiln.compile: {'available' if hasattr(kiln, 'compile') else 'not available yet'}; {builds}")
    print(f"devices: cpu ({available_cpus()} cores, {platform.machine()})"
          + (f", {_cuda_devices()}" if kiln.cuda_is_available() else ", cuda not available"))
    return 0


def _cuda_devices() -> str:
    try:
        import cupy  # noqa: PLC0415

        count = cupy.cuda.runtime.getDeviceCount()
        names = [cupy.cuda.runtime.getDeviceProperties(i)["name"].decode() for i in range(count)]
        return ", ".join(f"cuda:{i} ({name})" for i, name in enumerate(names))
    except Exception as exc:  # noqa: BLE001 - describing devices must never crash `info`
        return f"cuda (could not list devices: {exc})"


def kiln_entries(kernels: Path) -> tuple[list[os.DirEntry], int]:
    """kiln's own entries in the kernels folder (kernels, hash records, locks, build folders) and their bytes."""
    from kiln.jit.backends.cpu.toolchain import is_kiln_entry  # noqa: PLC0415 - keeps `kiln --help` light

    if not kernels.is_dir() or kernels.is_symlink():
        return [], 0
    entries = [e for e in os.scandir(kernels) if is_kiln_entry(e.name)]
    size = 0
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            size += dir_usage(Path(entry.path))[1]
        else:
            with contextlib.suppress(OSError):
                size += entry.stat(follow_symlinks=False).st_size
    return entries, size


def describe_kernel_cache(cache: Path) -> str:
    """What the kernel cache under `cache` holds, and whether kiln will use it, for `info` lines."""
    from kiln.jit.backends.cpu.toolchain import cache_problem  # noqa: PLC0415

    kernels = cache / "kernels"
    if not kernels.exists() and not kernels.is_symlink():
        return "not created yet"
    entries, size = kiln_entries(kernels)
    count = sum(e.name.endswith(".so") for e in entries)
    text = f"{count} kernels, {len(entries)} kiln files, {human_bytes(size)}"
    problem = cache_problem(kernels)
    if problem:
        text += f"; NOT USED: {problem[0]} (fix: {problem[1]})"
    return text


def cmd_cache(args: argparse.Namespace) -> int:
    """``cache info`` shows the kernel cache; ``cache clear`` deletes kiln's entries from it, nothing else.

    Only names kiln gives (toolchain.is_kiln_entry) are removed, so a $KILN_CACHE_DIR that
    also holds the user's files keeps them; a process building at that moment rebuilds.
    """
    cache = kernel_cache_dir()
    if args.action == "info":
        print(f"kernel cache: {cache / 'kernels'} ({describe_kernel_cache(cache)})")
        return 0
    kernels = cache / "kernels"
    if not cache.exists():
        print(f"kernel cache {cache} does not exist; nothing to clear")
        return 0
    if not cache.is_dir():
        raise CLIError(f"kernel cache path {cache} is not a directory; check $KILN_CACHE_DIR")
    resolved = cache.resolve()
    if resolved == Path(resolved.anchor) or resolved == Path.home().resolve():
        raise CLIError(f"refusing to clear {resolved}: it is the filesystem root or your home directory; "
                       "set $KILN_CACHE_DIR to a dedicated folder")
    if not kernels.exists() and not kernels.is_symlink():
        print(f"kernel cache {kernels} does not exist; nothing to clear")
        return 0
    if kernels.is_symlink() or not kernels.is_dir():
        raise CLIError(f"{kernels} is a symlink or not a folder: kiln does not use it, so nothing of kiln's is "
                       "there to clear; remove it yourself if you like")
    entries, size = kiln_entries(kernels)
    try:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
    except OSError as exc:
        raise CLIError(f"could not clear {kernels}: {exc.strerror or exc}") from None
    others = sum(1 for _ in kernels.iterdir())
    kept = f"; left {others} other files alone" if others else ""
    print(f"cleared kernel cache {kernels}: removed {len(entries)} kiln files ({human_bytes(size)}){kept}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Train the CNN demo on the bundled digits."""
    from kiln.demo import DemoConfig, DemoError, run_demo  # noqa: PLC0415

    if args.ranks > 1:
        from kiln.distributed.mpi import launched_world_size  # noqa: PLC0415

        if launched_world_size() == 1:  # not yet under MPI: start N ranks of this same command
            return relaunch_demo(args)
    elif args.ranks == 1 and "--ranks" in sys.argv[1:]:
        print("kiln demo: --ranks 1 trains in this one process; pass --ranks 2 or more for data-parallel "
              "training with DistributedDataParallel")
    config = DemoConfig(epochs=args.epochs, eager=args.eager, backend=args.backend, out=args.out, ranks=args.ranks)
    try:
        run_demo(config)
    except DemoError as exc:
        raise CLIError(str(exc)) from None
    return 0


def relaunch_demo(args: argparse.Namespace) -> int:
    """Run ``python -m kiln demo ...`` on `args.ranks` ranks through mpiexec; its exit code."""
    from kiln.distributed.mpi import EXTRA_HINT, load_mpi  # noqa: PLC0415
    from kiln.distributed.run import find_mpiexec  # noqa: PLC0415

    try:
        load_mpi()
    except ImportError as exc:
        raise CLIError(f"--ranks {args.ranks} needs MPI: {exc}") from None
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise CLIError(f"--ranks {args.ranks} needs mpiexec, which was not found. Fix: {EXTRA_HINT}")
    command = [mpiexec, "-n", str(args.ranks), sys.executable, "-m", "kiln", "demo", "--epochs", str(args.epochs),
               "--backend", args.backend, "--out", args.out, "--ranks", str(args.ranks)]
    if args.eager:
        command.append("--eager")
    env = dict(os.environ)
    threads = str(max(1, (os.cpu_count() or 1) // args.ranks))
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, threads)
    return subprocess.call(command, env=env)


def cmd_bench(argv: Sequence[str]) -> int:
    from kiln.bench.__main__ import main as bench_main  # noqa: PLC0415

    return bench_main(list(argv), prog="kiln bench")


# ---- parser -----------------------------------------------------------------------
def positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kiln", description="kiln: a readable deep-learning library.")
    parser.add_argument("--version", action="version", version=f"kiln {package_version('kiln') or '?'}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser("demo", help="train a small CNN on the bundled handwritten digits",
                          description="Train a small CNN on the bundled UCI digits; report accuracy and speed; "
                                      "save the weights and a plot.")
    demo.add_argument("--epochs", type=positive_int, default=DEMO_EPOCHS,
                      help=f"training epochs (default {DEMO_EPOCHS})")
    demo.add_argument("--eager", action="store_true", help="run eagerly instead of with kiln.compile")
    demo.add_argument("--backend", default="auto", help="kiln.compile backend (default: auto)")
    demo.add_argument("--out", default="kiln-demo", metavar="DIR",
                      help="folder for the weights and the plot (default: ./kiln-demo)")
    demo.add_argument("--ranks", type=positive_int, default=1, metavar="N",
                      help="train on N processes with DistributedDataParallel over MPI (needs kiln[distributed])")
    demo.set_defaults(handler=cmd_demo)

    sub.add_parser("bench", help="run a benchmark workload (see: kiln bench --help)", add_help=False)

    info = sub.add_parser("info", help="versions, C compiler, kernel cache and devices")
    info.set_defaults(handler=cmd_info)

    cache = sub.add_parser("cache", help="show (info) the kernel cache or remove kiln's kernels from it (clear)")
    cache.add_argument("action", nargs="?", choices=("info", "clear"), default="info")
    cache.set_defaults(handler=cmd_cache)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m kiln`` and the ``kiln`` script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":  # kiln.bench has its own parser: hand it the rest verbatim
        return cmd_bench(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.handler(args)
    except CLIError as exc:
        print(f"kiln {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"kiln {args.command}: interrupted", file=sys.stderr)
        return 130
