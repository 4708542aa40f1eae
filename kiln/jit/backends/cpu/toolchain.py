"""Compile C source to a shared library with the system compiler, cached on disk by hash.

Loading a shared library runs its code, so the on-disk cache is treated as untrusted:

* It lives in ``$KILN_CACHE_DIR`` (default ``~/.cache/kiln``) under ``kernels/``, both
  created with mode 0700. A kernels folder that is a symlink, belongs to another user or is
  writable by group or others is not used, nor is one below a folder (up to the root) that
  belongs to another user than you or root, or that group or others may write and is not
  sticky like /tmp (they could swap the cache folder): kiln warns once, naming the folder
  and the fix, and builds in a private temporary folder for the rest of the process.
* An entry is ``k_<key>.so`` plus ``k_<key>.sha256`` (``sha256sum`` format), the hash of
  the library's bytes recorded when it was built. Entries are opened without following
  symlinks and loaded only when their bytes match the record; anything else (planted,
  truncated, garbage, missing its symbol) is rebuilt with a RuntimeWarning.
* The key covers the source, the compiler command and version, the flags and the CPU
  features the ``-march`` targets (``native``, or ``$KILN_MARCH`` such as ``x86-64-v3``), so a
  changed toolchain, machine or target never reuses a library.
* Builds are atomic (temp file + rename) and serialized per key by a lock file, so
  concurrent processes never see half an entry and all load the same verified kernel.
* Kernels are built with ``-fopenmp`` where the compiler can build and load a tiny OpenMP
  library (probed once; it is part of the key); elsewhere they run serially, with one
  debug note. Before the first OpenMP library loads, kiln loads libgomp with its idle-thread
  policy (`openmp_environment`, unless $OMP_WAIT_POLICY or $GOMP_SPINCOUNT is set): spinning
  a few milliseconds where NumPy's OpenBLAS will run its threads on kiln's team (blas_team.py),
  else sleeping at once, so they do not steal the CPUs from OpenBLAS's own spinning threads.
* Probing the compiler (a tiny build, OpenMP, ``--version``, the ``-march`` macros) takes
  subprocesses; a working compiler's results are recorded as ``k_<key>.json`` with its
  ``.sha256``, keyed by the compiler binary (path, size, modification time), the flags and
  the CPU, and trusted like a kernel entry, so a new process with a warm cache runs none.

Compiler trouble (none found, failing, silent, misconfigured ``$CC``, hanging past
``$KILN_CC_TIMEOUT`` seconds) raises CompilerUnavailable; the backend then interprets.
`kiln cache clear` removes the names `is_kiln_entry` accepts and nothing else.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import json
import logging
import math
import os
import platform
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Callable, Iterator

from . import parallel
from .blas import can_share_team

try:
    import fcntl
except ImportError:  # not POSIX: builds are not serialized across processes (loads still verify hashes)
    fcntl = None  # type: ignore[assignment]

LOW_PRIORITY = 19  # the nice value of a compiler run in the background: it gets the CPU time left idle
MARCH_ENV = "KILN_MARCH"  # e.g. x86-64-v3: build kernels for a lower target than this machine (default native)


def march() -> str:
    """The -march kernels are built for: $KILN_MARCH (read at import), else native."""
    return _MARCH


def _march_from_environment() -> str:
    """$KILN_MARCH when it can be a -march value, else native (with a warning naming the fix)."""
    value = os.environ.get(MARCH_ENV, "").strip() or "native"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", value):
        warnings.warn(f"kiln: ${MARCH_ENV} must name a -march target such as native, x86-64-v3 or "
                      f"armv8.2-a, got {value!r}; building kernels for native instead (fix or unset it)",
                      RuntimeWarning, stacklevel=2)
        return "native"
    return value


_MARCH = _march_from_environment()
# -ffp-contract=off: no FMA where the source does not ask for one (NumPy rounds a*b+c twice).
# -fno-trapping-math: the generated source vectorizes without it (selects on bit patterns, see
# render/vecmath.py; tests/jit/test_vectorize_targets.py builds without it), and it changes no result,
# but it frees the compiler to if-convert what it otherwise keeps as branches.
FLAGS = ["-O3", f"-march={_MARCH}", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off", "-std=c99",
         "-fPIC", "-shared"]
if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686"):
    # 512-bit loads and stores split a cache line on every access unless the array is 64-byte
    # aligned, which NumPy does not promise: 256-bit vectors run ~1.4x faster on such arrays
    FLAGS.insert(2, "-mprefer-vector-width=256")
SYMBOL = "kiln_fused"  # the function codegen.render emits: a library without it is not a kernel
DEFAULT_TIMEOUT_S = 120.0
TEMP_PREFIX = "kiln-tmp-"  # kiln's build and load folders inside the cache
ENTRY_NAME = re.compile(r"k_[0-9a-f]{16,64}\.(?:so|sha256|lock|json)")
PROBE_SOURCE = "int kiln_probe(void) { return 42; }\n"
OPENMP_FLAG = "-fopenmp"
OPENMP_PROBE_SOURCE = """#include <omp.h>
int kiln_probe(void) {
    int n = 0;
    #pragma omp parallel num_threads(2) reduction(+:n)
    n += 1;
    return n + 40 + (omp_get_max_threads() > 0);
}
"""
OPENMP_SPIN_COUNT = "200000"
"""$GOMP_SPINCOUNT kiln loads libgomp with where OpenBLAS shares kiln's team: an idle OpenMP thread spins this many
pause instructions (about 5 ms on a Zen 4, 25 ns each) before it sleeps. Measured on a 2-vCPU Zen 4 VM: waking a
sleeping thread cost 45 us per threaded OpenBLAS GEMM (128x64x128: 60 us instead of 15), a compiled GPT step with
thousands of small attention GEMMs about 15%, and a GCN step whose two GEMMs come 2.5 ms apart about 13% with a
50 us spin (a halted virtual CPU wakes slowly); OpenBLAS's own threads spin for tens of milliseconds, libgomp's
default about 7 ms (and only 1000 pauses when a process has more threads than CPUs)."""
OPENMP_SLEEPING = "passive"
"""$OMP_WAIT_POLICY kiln loads libgomp with where OpenBLAS keeps its own threads: idle kiln threads sleep at once,
leaving the CPUs to OpenBLAS's spinning workers (spinning kiln threads measured 1.3-2.4x slower than serial for
LayerNorm+GELU and a following GEMM on a busy 2-CPU machine)."""


_KEY_FORMAT = 2  # bump when the entry layout changes
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)

_lock = threading.RLock()
_compiling = 0  # compiler processes running (builds_in_flight)
_loaded: dict[str, ctypes.CDLL] = {}  # key -> library, for this process
_building: dict[str, threading.Lock] = {}  # key -> the lock its (one) builder holds
_probed: dict[tuple[str, ...], str | None] = {}  # compiler command -> why it does not work (None: it works)
_versions: dict[tuple[str, ...], str] = {}
_targets: dict[tuple[str, ...], str] = {}
# called after each load of a library whose kernels run on teams (blas_team.py adds its `share`: the teams must not
# share the CPUs with OpenBLAS's spinning threads)
after_team_library: list[Callable[[], object]] = []
_macros: dict[tuple[str, ...], str] = {}  # compiler command -> its predefined macros under -march
_openmp: dict[tuple[str, ...], bool] = {}  # compiler command -> whether it builds OpenMP kernels
_runtime_prepared: list[bool] = []  # [whether kernels may run on teams], once libgomp is prepared
_log = logging.getLogger("kiln.jit")
_warned_dirs: set[str] = set()
_private: Path | None = None


class CompilerUnavailable(RuntimeError):
    """No working C compiler was found (set $CC, or install gcc or clang)."""


class CompilerTimeout(CompilerUnavailable):
    """The compiler ran past $KILN_CC_TIMEOUT: it is not tried again in this process."""


class _Rejected(Exception):
    """A library or cache entry kiln will not load; the message says why."""


# ---- process state ----------------------------------------------------------------------
def _reset_state() -> None:
    """Forget this process's loaded kernels, compiler probes, warnings and private folder (for tests)."""
    global _private
    with _lock:
        _loaded.clear()
        _probed.clear()
        _versions.clear()
        _targets.clear()
        _macros.clear()
        _openmp.clear()
        _stored.clear()
        _warned_dirs.clear()
        _private = None


# ---- the compiler -----------------------------------------------------------------------
def find_compiler() -> str | None:
    """The compiler command as configured: $CC if set, else the first of cc, gcc, clang on PATH."""
    configured = os.environ.get("CC", "").strip()
    if configured:
        return configured
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def compiler_command() -> list[str]:
    """find_compiler() as argv, split like a shell would (CC="gcc -O2" works), program resolved on PATH."""
    configured = find_compiler()
    if configured is None:
        raise CompilerUnavailable("no C compiler found: install gcc or clang, or set $CC")
    whole = shutil.which(configured)
    if whole:  # a path with spaces, unquoted
        return [whole]
    try:
        argv = shlex.split(configured)
    except ValueError as exc:
        raise CompilerUnavailable(f"cannot parse $CC={configured!r} ({exc}): expected a command such as "
                                  "'gcc' or 'clang -O2'") from None
    program = shutil.which(argv[0]) if argv else None
    if program is None:
        raise CompilerUnavailable(f"the C compiler {configured!r} was not found or is not executable: expected "
                                  "a program on PATH such as gcc or clang; install one or fix $CC")
    return [program, *argv[1:]]


def compiler_timeout() -> float:
    """Seconds one compiler run may take: $KILN_CC_TIMEOUT, default 120."""
    text = os.environ.get("KILN_CC_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise CompilerUnavailable(f"$KILN_CC_TIMEOUT={text!r}: expected a positive number of seconds")
    return value


# A compiler runs in a process group of its own, so that a timeout kills a wrapper script's children too.
# Not in a session of its own where Python can avoid it (3.11+): Linux gives each session an equal share
# of the CPUs (autogroup), whatever its nice value, so a compiler in the background would take one from
# the program's own threads.
_OWN_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}


def _run(argv: list[str], timeout: float, low_priority: bool = False) -> subprocess.CompletedProcess:
    """Run a compiler command in its own process group; `low_priority`: at the lowest CPU priority (the
    group's processes, and so the ones they start), so that a build in the background takes only the CPU
    time the calling program leaves idle."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace", **_OWN_GROUP)
    except OSError as exc:
        raise CompilerUnavailable(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    if low_priority and hasattr(os, "setpriority"):
        with contextlib.suppress(OSError):  # (it may have exited already)
            os.setpriority(os.PRIO_PGRP, proc.pid, LOW_PRIORITY)
            if "start_new_session" in _OWN_GROUP:  # (Python 3.10: a session of its own) lower its share too
                Path(f"/proc/{proc.pid}/autogroup").write_text(str(LOW_PRIORITY))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise CompilerTimeout(f"{argv[0]} did not finish within {timeout:g} s; set $KILN_CC_TIMEOUT to "
                              "allow longer") from None
    except BaseException:
        _kill(proc)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _kill(proc: subprocess.Popen) -> None:
    """Kill `proc` and everything it started, then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (AttributeError, OSError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=5)


def compiler_problem() -> str | None:
    """Why the C compiler cannot build kernels, or None when it can (a tiny build, once per process)."""
    try:
        return _probe(compiler_command())
    except CompilerUnavailable as exc:
        return str(exc)


def _probe(command: list[str]) -> str | None:
    """The cached result of building and loading a tiny library with `command`, where kernels will be.

    A working compiler's probe results (that it works, its version, what -march=native
    targets) are also kept on disk (`_load_probes`), so a new process runs no subprocess.
    """
    key = tuple(command)
    with _lock:
        if key not in _probed:
            if _load_probes(command):
                _probed[key] = None
                return None
            try:
                folder = kernel_dir()
                with _temp_folder(folder) as tmp:
                    data = _compile(command, PROBE_SOURCE, tmp)
                _load_bytes(data, folder, "kiln_probe")
                _probed[key] = None
                _probe_openmp(command, folder)
            except _Rejected as exc:
                _probed[key] = f"{command[0]} built a library kiln cannot use: {exc}"
            except (CompilerUnavailable, OSError) as exc:
                _probed[key] = str(exc)
        return _probed[key]


def _probe_openmp(command: list[str], folder: Path) -> bool:
    """Whether `command` builds and loads a working OpenMP library (cached per process; one debug note if not)."""
    key = tuple(command)
    if key not in _openmp:
        try:
            with _temp_folder(folder) as tmp:
                data = _compile(command, OPENMP_PROBE_SOURCE, tmp, [OPENMP_FLAG])
            prepare_openmp_runtime()
            lib = _load_bytes(data, folder, "kiln_probe")
            works = lib.kiln_probe() == 43
            problem = None if works else "its test region did not run"
        except (CompilerUnavailable, _Rejected, OSError) as exc:
            works, problem = False, (str(exc).strip().splitlines() or ["failed"])[-1]
        _openmp[key] = works
        if not works:
            _log.debug("kiln: %s cannot build OpenMP kernels (%s); generated kernels run on one thread",
                       command[0], problem)
    return _openmp[key]


def openmp_flags(command: list[str]) -> list[str]:
    """The flags that make `command` build OpenMP kernels: [OPENMP_FLAG] if its probe passed, else none."""
    return [OPENMP_FLAG] if _openmp.get(tuple(command)) else []


def prepare_openmp_runtime() -> bool:
    """Load libgomp with `openmp_environment`, once, before any kernel loads it (it reads the policy only then);
    whether kernels may run on teams.

    Yes when the user set $OMP_WAIT_POLICY or $GOMP_SPINCOUNT (their choice), or kiln loaded libgomp
    with its own policy. No when there is no libgomp.so.1 (another runtime, e.g. clang's libomp,
    whose policy kiln does not set), or when a libgomp with an unknown policy was loaded first (PyTorch ships
    one named libgomp.so.1, which kernels would share): its default spins idle threads for a while
    after every region, which measured 1.3-2.4x slower than serial on a busy machine, so kernels stay
    serial (one debug note) unless the user sets the policy before that library loads.
    """
    if not _runtime_prepared:
        _runtime_prepared.append(_prepare_openmp_runtime())
    return _runtime_prepared[0]


def openmp_environment() -> tuple[str, str]:
    """The variable and value kiln loads libgomp with: a spin of OPENMP_SPIN_COUNT where NumPy's OpenBLAS can run its
    threads on kiln's team (nothing else spins then), else OPENMP_SLEEPING."""
    if can_share_team():
        return "GOMP_SPINCOUNT", OPENMP_SPIN_COUNT
    return "OMP_WAIT_POLICY", OPENMP_SLEEPING


def _prepare_openmp_runtime() -> bool:
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return True
    try:
        ctypes.CDLL("libgomp.so.1", mode=getattr(os, "RTLD_NOLOAD", 4))
    except OSError:
        pass
    else:
        _log.debug("kiln: libgomp was loaded before kiln's kernels (by PyTorch?) with an unknown wait policy, so "
                   "generated kernels run on one thread; set GOMP_SPINCOUNT=2000 before importing it to allow "
                   "teams")
        return False
    name, value = openmp_environment()
    os.environ[name] = value  # libgomp reads it once, when it loads
    try:
        ctypes.CDLL("libgomp.so.1")
    except OSError:  # another OpenMP runtime (clang's libomp reads the policy later, and spins by default)
        _log.debug("kiln: no libgomp.so.1 to load with kiln's wait policy, so generated kernels run on one "
                   "thread; set OMP_WAIT_POLICY=passive to allow teams with this compiler's OpenMP runtime")
        return False
    finally:
        del os.environ[name]
    return True


def _probe_key(command: list[str]) -> str | None:
    """The key of a compiler's probe record: its command, the binary's path, size and modification time,
    the flags, and the machine and CPU (so a changed compiler or CPU is probed again); None when the
    binary cannot be examined."""
    try:
        st = os.stat(command[0])
    except OSError:
        return None
    parts = {"format": _KEY_FORMAT, "probe": 2, "command": command, "binary": [st.st_size, st.st_mtime_ns, st.st_ino],
             "flags": FLAGS, "machine": platform.machine(), "cpu": _cpuinfo_flags()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _load_probes(command: list[str]) -> bool:
    """Fill this process's probe results from a verified record on disk; whether there was one.

    The record is ``k_<key>.json`` with its ``k_<key>.sha256``, trusted like a kernel entry: read
    without following symlinks, owned by this user, and only when its bytes match the hash.
    """
    key = _probe_key(command)
    if key is None:
        return False
    try:
        folder = kernel_dir()
        path = folder / f"k_{key}.json"
        data = _read_own(path)
        if hashlib.sha256(data).hexdigest() != _recorded_hash(path.with_suffix(".sha256"), path.name):
            return False
        record = json.loads(data.decode())
    except (OSError, _Rejected, ValueError, CompilerUnavailable):
        return False
    if not (isinstance(record, dict) and isinstance(record.get("version"), str)
            and isinstance(record.get("target"), str) and re.fullmatch(r"[0-9a-f]{16}", record["target"])
            and isinstance(record.get("openmp"), bool)):
        return False
    _versions[tuple(command)] = record["version"]
    _openmp[tuple(command)] = record["openmp"]
    _targets[tuple(command)] = record["target"]
    _stored.add(tuple(command))
    return True


_stored: set[tuple[str, ...]] = set()  # compilers whose probe record this process wrote or read


def _store_probes(command: list[str]) -> None:
    """Record a working compiler's version and target on disk, once (best effort)."""
    if tuple(command) in _stored:
        return
    _stored.add(tuple(command))
    key = _probe_key(command)
    if key is None:
        return
    record = {"version": compiler_version(command), "target": target_features(command),
              "openmp": bool(_openmp.get(tuple(command)))}
    with contextlib.suppress(OSError, CompilerUnavailable):
        path = kernel_dir() / f"k_{key}.json"
        _publish(path, path.with_suffix(".sha256"), json.dumps(record, sort_keys=True).encode())


def builds_in_flight() -> int:
    """How many compiler processes this process is running now."""
    return _compiling


def _compile(command: list[str], source: str, workdir: Path, extra: list[str] | None = None,
             low_priority: bool = False) -> bytes:
    """The bytes of the library `command` builds from `source` in `workdir` with FLAGS and `extra`
    (CompilerUnavailable if none); `low_priority` as `_run`."""
    global _compiling
    src = workdir / "kernel.c"
    src.write_text(source)
    out = workdir / "kernel.so"
    with _lock:
        _compiling += 1
    try:
        result = _run([*command, *FLAGS, *(extra or []), str(src), "-o", str(out), "-lm"], compiler_timeout(),
                      low_priority)
    finally:
        with _lock:
            _compiling -= 1
    if result.returncode != 0:
        raise CompilerUnavailable(f"{command[0]} failed (exit status {result.returncode}) to build a kernel:\n"
                                  f"{(result.stderr or result.stdout)[-2000:]}")
    try:
        data = _read_own(out)
    except (OSError, _Rejected):
        data = b""
    if not data:
        raise CompilerUnavailable(f"{command[0]} exited 0 but wrote no library to {out.name}: expected a C "
                                  "compiler such as gcc or clang; fix $CC")
    return data


def compiler_version(command: list[str]) -> str:
    """The first line of `command --version` (cached per process; "unknown" when it cannot be had)."""
    key = tuple(command)
    if key not in _versions:
        try:
            result = _run([*command, "--version"], min(compiler_timeout(), 30.0))
            lines = (result.stdout or result.stderr).strip().splitlines()
            _versions[key] = lines[0] if result.returncode == 0 and lines else "unknown"
        except CompilerUnavailable:
            _versions[key] = "unknown"
    return _versions[key]


def target_features(command: list[str]) -> str:
    """What -march means on this machine (cached per process): a digest of the compiler's predefined
    macros under it (__AVX2__ and the like), else of /proc/cpuinfo's flags."""
    key = tuple(command)
    if key not in _targets:
        text = _macro_text(command)
        text = "macros:" + text if text else "cpuinfo:" + _cpuinfo_flags()
        _targets[key] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return _targets[key]


def target_macros() -> set[str]:
    """The names of the macros the configured compiler predefines under kiln's -march (empty without one)."""
    try:
        command = compiler_command()
    except CompilerUnavailable:
        return set()
    return {line.split()[1] for line in _macro_text(command).splitlines() if line.startswith("#define ")}


def _macro_text(command: list[str]) -> str:
    """`command -march=... -dM -E` of an empty file, sorted ("" when it fails; cached per process)."""
    key = tuple(command)
    if key not in _macros:
        text = ""
        try:
            result = _run([*command, f"-march={_MARCH}", "-x", "c", "-E", "-dM", os.devnull],
                          min(compiler_timeout(), 30.0))
            if result.returncode == 0:
                text = "\n".join(sorted(result.stdout.splitlines()))
        except CompilerUnavailable:
            pass
        _macros[key] = text
    return _macros[key]


def _cpuinfo_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        return platform.processor()


def kernel_key(source: str, command: list[str]) -> str:
    """The cache key: source, compiler command and version, flags (OpenMP included), target CPU features, machine."""
    parts = {"format": _KEY_FORMAT, "source": source, "compiler": command, "version": compiler_version(command),
             "flags": [*FLAGS, *openmp_flags(command)], "target": target_features(command), "machine": platform.machine()}
    if _probed.get(tuple(command), "") is None:
        _store_probes(command)  # the compiler works: a new process need not probe it again
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


# ---- the cache folder -------------------------------------------------------------------
def cache_dir() -> Path:
    """Where kernels are cached when that folder is safe: $KILN_CACHE_DIR (or ~/.cache/kiln) / kernels."""
    configured = os.environ.get("KILN_CACHE_DIR")
    base = Path(configured).expanduser() if configured else Path.home() / ".cache" / "kiln"
    return base / "kernels"


def is_kiln_entry(name: str) -> bool:
    """Whether a name in the kernels folder is kiln's own (a kernel, its record or lock, a build folder)."""
    return ENTRY_NAME.fullmatch(name) is not None or name.startswith(TEMP_PREFIX)


def cache_problem(folder: Path) -> tuple[str, str] | None:
    """(problem, fix) when code loaded from `folder` could be swapped by someone else; None when safe.

    The kernels folder must be a real folder (not a symlink) owned by this user and not
    writable by group or others. Every folder above it, up to the filesystem root (with
    symlinks resolved, so $KILN_CACHE_DIR may be one), must be owned by this user or root and
    must not be writable by group or others unless sticky like /tmp: whoever may write to a
    folder may rename what is in it, and so could put their own kernels folder in place of
    this one between kiln's checks and the load. The outermost unsafe folder is named.
    """
    parent = Path(os.path.realpath(folder.parent))
    for ancestor in [*reversed(parent.parents), parent]:
        problem = _unsafe(ancestor, "parent" if ancestor == parent else "ancestor")
        if problem is not None:
            return problem
    return _unsafe(folder, "leaf")


def resolved_cache_folder(folder: Path) -> Path:
    """`folder` with every symlink above it resolved (the folder itself is kept, so a symlink there is seen)."""
    return Path(os.path.realpath(folder.parent)) / folder.name


def _unsafe(path: Path, role: str) -> tuple[str, str] | None:
    """Why `path` is unsafe as the kernels folder (`role` "leaf"), the folder holding it ("parent") or a
    folder further up ("ancestor"), with the fix; None when it is safe or does not exist yet."""
    leaf = role == "leaf"
    try:
        st = os.lstat(path) if leaf else os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be inspected ({exc.strerror or exc})", "set KILN_CACHE_DIR to a folder you own"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink", f"replace it with a real folder (rm {path}) or set KILN_CACHE_DIR"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder", f"remove {path} or set KILN_CACHE_DIR to a folder you own"
    euid = _euid()
    if euid is not None and st.st_uid != euid and (leaf or st.st_uid != 0):
        above = "" if leaf else ", who could swap the kernels folder inside it for their own"
        return (f"{path} is owned by another user (uid {st.st_uid}, you are uid {euid}){above}",
                "set KILN_CACHE_DIR to a folder you own" + ("" if leaf else ", inside folders only you or root own"))
    writable = [who for who, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]
    if writable and (leaf or not st.st_mode & stat.S_ISVTX):
        mode = f"mode {stat.S_IMODE(st.st_mode):o}"
        folder = shlex.quote(str(path))
        if role == "ancestor":
            bits = "".join(who[0] for who in writable) + "-w"
            return (f"{path}, a folder above the kernel cache, is writable by {' and '.join(writable)} and not "
                    f"sticky ({mode}), so they could rename the cache folder inside it and put their own in its "
                    "place", f"chmod {bits} {folder} (or chmod +t {folder} to make it sticky like /tmp), or set "
                    "KILN_CACHE_DIR to a folder inside folders only you or root can write")
        return (f"{path} is writable by {' and '.join(writable)} ({mode})",
                f"chmod 700 {folder}, or set KILN_CACHE_DIR to a folder only you can write")
    return None


def _euid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def kernel_dir() -> Path:
    """The folder to build kernels in: cache_dir() made 0700 when safe, else a private temporary folder.

    The path comes back with the symlinks above it resolved, as checked, so a symlink changed
    afterwards cannot redirect kiln to another folder.
    """
    folder = cache_dir()
    try:
        os.makedirs(folder.parent, mode=0o700, exist_ok=True)  # the leaf only gets 0700: ~/.cache stays as is
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
        folder = resolved_cache_folder(folder)
        problem = cache_problem(folder)
    except OSError as exc:
        problem = f"it cannot be created ({exc.strerror or exc})", "set KILN_CACHE_DIR to a folder you can write"
    if problem is None:
        return folder
    with _lock:
        if str(folder) not in _warned_dirs:
            _warned_dirs.add(str(folder))
            warnings.warn(f"kiln: not using the kernel cache {folder}: {problem[0]} (loading a kernel runs its "
                          "code, so its folder, and every folder above it, must be writable only by you or root). "
                          f"Fix: {problem[1]}. Until then kernels are built in a private temporary folder for this "
                          "process only.", RuntimeWarning, stacklevel=4)
        return _private_dir()


def _private_dir() -> Path:
    """A 0700 temporary folder for this process's kernels, removed at exit."""
    global _private
    if _private is None or not _private.is_dir():
        try:
            private = resolved_cache_folder(Path(tempfile.mkdtemp(prefix="kiln-kernels-")))
        except OSError as exc:
            raise CompilerUnavailable(f"no folder to build kernels in: the cache is unusable and a temporary "
                                      f"folder cannot be made ({exc.strerror or exc})") from None
        problem = cache_problem(private)
        if problem is not None:
            shutil.rmtree(private, ignore_errors=True)
            raise CompilerUnavailable(f"no safe folder to build kernels in: the cache is unusable, and so is the "
                                      f"temporary folder {private}: {problem[0]}. Fix: {problem[1]}, or set "
                                      "TMPDIR to a folder only you can write")
        _private = private
        atexit.register(shutil.rmtree, _private, True)
    return _private


# ---- entries ----------------------------------------------------------------------------
def _read_own(path: Path) -> bytes:
    """The bytes of a regular file this user owns, opened without following a symlink at `path`."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError as exc:
        if os.path.islink(path):
            raise _Rejected(f"{path.name} is a symlink") from None
        raise exc
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Rejected(f"{path.name} is not a regular file")
        euid = _euid()
        if euid is not None and st.st_uid != euid:
            raise _Rejected(f"{path.name} is owned by uid {st.st_uid}, not by you (uid {euid})")
        return f.read()


def _recorded_hash(record: Path, library: str) -> str:
    """The sha256 a record (``<hex>  <name>``) holds for `library`."""
    try:
        text = _read_own(record).decode("ascii", errors="replace")
    except FileNotFoundError:
        raise _Rejected(f"it has no hash record {record.name}, so its origin is unknown") from None
    except OSError as exc:
        raise _Rejected(f"its record {record.name} cannot be read ({exc.strerror or exc})") from None
    fields = text.split()
    if len(fields) != 2 or fields[1] != library or not re.fullmatch(r"[0-9a-f]{64}", fields[0]):
        raise _Rejected(f"its record {record.name} is malformed: expected '<sha256>  {library}', got {text[:100]!r}")
    return fields[0]


@contextlib.contextmanager
def _temp_folder(parent: Path) -> Iterator[Path]:
    """A fresh 0700 folder inside `parent` (kiln's naming, so `kiln cache clear` knows it), removed after."""
    tmp = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=parent))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _load_bytes(data: bytes, folder: Path, symbol: str | None) -> ctypes.CDLL:
    """dlopen exactly `data`, through a private copy, and check it exports `symbol`.

    Why a copy: verifying a file's hash and then dlopen()ing the same path leaves a window
    in which the path can be renamed over (time of check, time of use). Hashing bytes in
    memory and loading a copy of those very bytes, written to a fresh 0700 folder only this
    user can enter, closes it portably (/proc/self/fd and memfd_create are Linux-only). The
    copy sits beside the cache, on a filesystem known to allow loading code, and is
    deleted once loaded (the mapping stays valid). Kernels are small, so copying is cheap.
    """
    with _temp_folder(folder) as tmp:
        path = tmp / "kernel.so"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o700)
        with open(fd, "wb") as f:
            f.write(data)
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise _Rejected(f"it is not a loadable library ({exc})") from None
    try:
        if symbol is not None:
            getattr(lib, symbol)
    except AttributeError:
        raise _Rejected(f"it does not export {symbol}") from None
    lib.kiln_sha256 = hashlib.sha256(data).hexdigest()
    return lib


def _load_entry(so: Path, record: Path, symbol: str | None) -> ctypes.CDLL | None:
    """The cached library `so` when its bytes match its record; None when there is no entry; _Rejected otherwise."""
    try:
        data = _read_own(so)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _Rejected(f"it cannot be read ({exc.strerror or exc})") from None
    recorded = _recorded_hash(record, so.name)
    actual = hashlib.sha256(data).hexdigest()
    if actual != recorded:
        raise _Rejected(f"its {len(data)} bytes hash to sha256 {actual[:16]}..., not the recorded "
                        f"{recorded[:16]}... (truncated, replaced or planted)")
    return _load_bytes(data, so.parent, symbol)


def _publish(so: Path, record: Path, data: bytes) -> None:
    """Rename the library, then its record, into place (never writing through an existing symlink)."""
    digest = hashlib.sha256(data).hexdigest()
    with _temp_folder(so.parent) as tmp:
        for target, content, mode in ((so, data, 0o700), (record, f"{digest}  {so.name}\n".encode(), 0o600)):
            staged = tmp / target.name
            fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode)
            with open(fd, "wb") as f:
                f.write(content)
            os.replace(staged, target)


@contextlib.contextmanager
def _entry_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path`: one process builds an entry while the others wait, then load it."""
    fd = None
    if fcntl is not None:
        with contextlib.suppress(OSError):  # an odd lock file (a symlink, a folder): go on unlocked
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        if fd is not None:
            os.close(fd)


# ---- building ---------------------------------------------------------------------------
def build(source: str, symbol: str | None = None, low_priority: bool = False) -> ctypes.CDLL:
    """The loaded library for `source`, from the verified cache or compiled now (see the module docstring).

    `symbol` is the function the library must export: by default SYMBOL when the source
    mentions it (every generated kernel does), else nothing is required. `low_priority`: the
    compiler runs at the lowest CPU priority (a build in the background, see background.py).
    """
    lib = _library(source, symbol, compile_if_missing=True, low_priority=low_priority)
    assert lib is not None
    return lib


def cached(source: str, symbol: str | None = None) -> ctypes.CDLL | None:
    """The library for `source` when this process has loaded it or the disk cache holds its verified entry;
    None when only the compiler could make it (nothing is compiled). CompilerUnavailable as `build`."""
    return _library(source, symbol, compile_if_missing=False)


def _library(source: str, symbol: str | None, compile_if_missing: bool,
             low_priority: bool = False) -> ctypes.CDLL | None:
    if symbol is None and SYMBOL in source:
        symbol = SYMBOL
    command = compiler_command()
    problem = _probe(command)
    if problem is not None:
        raise CompilerUnavailable(problem)
    key = kernel_key(source, command)
    with _lock:
        lib = _loaded.get(key)
        if lib is not None:
            return lib
        folder = kernel_dir()
        teams = bool(openmp_flags(command)) and prepare_openmp_runtime()
        key_lock = _building.setdefault(key, threading.Lock())
    # one key at a time, but different kernels build concurrently (a training plan's forward and
    # backward, each in its own compiler process); a lookup does not wait for a build of its key
    if not key_lock.acquire(blocking=compile_if_missing):
        return None
    try:
        with _lock:
            lib = _loaded.get(key)
        if lib is not None:
            return lib
        try:
            with _entry_lock(folder / f"k_{key}.lock"):
                lib = _load_or_build(command, source, folder / f"k_{key}.so", symbol, compile_if_missing,
                                     low_priority)
            if lib is None:
                return None
            if teams:  # else the library keeps its own settings: serial
                with _lock:
                    parallel.attach(lib)
        except OSError as exc:  # e.g. a full disk: the backend interprets instead of crashing
            raise CompilerUnavailable(f"cannot build kernels in {folder}: {exc.strerror or exc}") from None
        with _lock:
            _loaded[key] = lib
            _building.pop(key, None)
    finally:
        key_lock.release()
    if teams:
        for hook in after_team_library:
            hook()
    return lib


def _load_or_build(command: list[str], source: str, so: Path, symbol: str | None,
                   compile_if_missing: bool, low_priority: bool) -> ctypes.CDLL | None:
    """The verified entry `so`, or a fresh build stored there (replacing a bad entry, with a warning);
    None when there is no usable entry and not `compile_if_missing`."""
    record = so.with_suffix(".sha256")
    try:
        lib = _load_entry(so, record, symbol)
        if lib is not None:
            return lib
    except _Rejected as exc:
        if not compile_if_missing:  # the build that replaces it warns
            return None
        warnings.warn(f"kiln: not loading the cached kernel {so}: {exc}; rebuilding it", RuntimeWarning,
                      stacklevel=6)
    if not compile_if_missing:
        return None
    with _temp_folder(so.parent) as tmp:
        try:
            data = _compile(command, source, tmp, openmp_flags(command), low_priority)
        except CompilerTimeout as exc:
            _probed[tuple(command)] = str(exc)  # do not wait on it again for every kernel
            raise
    try:
        lib = _load_bytes(data, so.parent, symbol)
    except _Rejected as exc:
        raise CompilerUnavailable(f"{command[0]} built a library kiln cannot use: {exc}") from None
    try:
        _publish(so, record, data)
    except OSError as exc:
        warnings.warn(f"kiln: could not store the kernel {so} in the cache ({exc.strerror or exc}); it will be "
                      "rebuilt next time", RuntimeWarning, stacklevel=6)
    return lib
