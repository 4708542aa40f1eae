"""Before a collective runs, the ranks check that they agree on it: same call, op, root, shape and dtype.

MPI itself does not check: an all-reduce of 3 values on one rank and 5 on another reduces the
first 3 and leaves the rest, and float32 against float64 mixes up the bytes, both without an
error. So every collective first all-gathers a small fixed-size descriptor (a few hundred bytes)
and every rank compares them all; a difference raises CollectiveMismatchError on every rank alike,
naming the ranks, the shapes and the dtypes. The check is on by default; once the code is known to
be right, ``KILN_DIST_CHECK_COLLECTIVES=0`` or ``init_process_group(check_collectives=False)``
turns it off (it must be on or off on every rank alike; `init_process_group` checks that).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from .waiting import wait

if TYPE_CHECKING:  # process_group imports this module
    from .process_group import ProcessGroup

CHECK_VARIABLE = "KILN_DIST_CHECK_COLLECTIVES"
TURN_OFF = f"{CHECK_VARIABLE}=0 or init_process_group(check_collectives=False)"

_COLLECTIVES = ("barrier", "all_reduce", "broadcast", "all_gather", "reduce_scatter")
_MAX_DIMS = 64  # NumPy's limit on the number of dimensions
_HEADER = 5     # collective, op, root, dtype, ndim; then the dims
_FIELDS = ("call", "op", "src", "dtype", "shape")


class CollectiveMismatchError(ValueError, RuntimeError):
    """The ranks called a collective with tensors (or ops, roots, calls) that do not match."""


def checks_from(value: bool | None) -> bool:
    """Whether collectives check their metadata: `value`, else ``$KILN_DIST_CHECK_COLLECTIVES`` (default on)."""
    if value is not None:
        if not isinstance(value, bool):
            raise TypeError(f"init_process_group(check_collectives=...) expects True, False or None, got {value!r}")
        return value
    text = os.environ.get(CHECK_VARIABLE, "").strip().lower()
    if text in ("", "1", "true", "on", "yes"):
        return True
    if text in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"${CHECK_VARIABLE}={os.environ[CHECK_VARIABLE]!r}: expected 1 (check the tensors of every "
                     "collective across ranks, the default) or 0 (skip the check)")


def describe(call: str, array: np.ndarray | None = None, op: str | None = None, root: int | None = None) -> np.ndarray:
    """The fixed-size int64 descriptor of one collective call, as every rank sends it."""
    d = np.full(_HEADER + _MAX_DIMS, -1, dtype=np.int64)
    d[0] = _COLLECTIVES.index(call)
    d[1] = _pack(op) if op is not None else -1
    d[2] = root if root is not None else -1
    if array is not None:
        d[3] = _pack(array.dtype.str)
        d[4] = array.ndim
        d[_HEADER:_HEADER + array.ndim] = array.shape
    return d


def _pack(text: str) -> int:
    """Up to 8 ASCII characters (an op name, a dtype such as '<f4') as one int64."""
    return int.from_bytes(str(text).encode("ascii", errors="replace")[:8].ljust(8, b"\0"), "little", signed=True)


def _unpack(code: int) -> str:
    return int(code).to_bytes(8, "little", signed=True).rstrip(b"\0").decode("ascii", errors="replace")


def checks_disagree(group: ProcessGroup) -> str | None:
    """All-gather each rank's `check_collectives` (a barrier too); what differs, or None when all agree."""
    everyone = np.empty(group.size, dtype=np.int8)
    wait(group.comm.Iallgather(np.array([group.check_collectives], dtype=np.int8), everyone),
         "init_process_group", group)
    if (everyone == everyone[0]).all():
        return None
    on = [r for r, flag in enumerate(everyone) if flag]
    off = [r for r, flag in enumerate(everyone) if not flag]
    return (f"init_process_group(): the ranks disagree on checking collectives: on for {_ranks(on)}, off for "
            f"{_ranks(off)}. A rank that checks would wait in a check the others never join. Fix: set "
            f"${CHECK_VARIABLE} (or init_process_group(check_collectives=...)) the same on every rank, e.g. in the "
            "launcher's environment rather than in the script")


def agree(group: ProcessGroup, mine: np.ndarray) -> None:
    """All-gather `mine` (from `describe`) and raise CollectiveMismatchError, on every rank, unless all match.

    Does nothing in a world of one or when the group's checks are off.
    """
    if group.comm is None or not group.check_collectives:
        return
    everyone = np.empty((group.size, mine.size), dtype=np.int64)
    call = _COLLECTIVES[int(mine[0])]
    wait(group.comm.Iallgather(mine, everyone), f"{call} (the check that all ranks pass matching tensors)", group)
    if (everyone == everyone[0]).all():
        return
    raise CollectiveMismatchError(_message(call, group.rank, everyone))


def _message(call: str, rank: int, everyone: np.ndarray) -> str:
    calls = [_decode(row) for row in everyone]
    groups: dict[tuple, list[int]] = {}
    for r, c in enumerate(calls):
        groups.setdefault(tuple(c.values()), []).append(r)
    differ = [f for f in _FIELDS if len({c[f] for c in calls}) > 1]
    differ = ["collective"] if "call" in differ else differ
    what = "; ".join(f"{_ranks(rs)} {_call_text(calls[rs[0]])}" for rs in groups.values())
    return (f"kiln.distributed.{call}() on rank {rank}: the ranks disagree on the {' and '.join(differ)}: {what}. "
            "Every rank must call the same collective with a tensor of the same shape and dtype (and the same op "
            "or src); otherwise MPI drops or mixes up part of the data without an error. Fix: give the tensor the "
            "same shape and dtype on every rank (pad or slice to a common shape, cast with .to(dtype)) and call "
            "the same collectives in the same order on every rank. This check costs one small all-gather per "
            f"collective; {TURN_OFF} turns it off once the code is known to be right")


def _decode(row: np.ndarray) -> dict:
    ndim = int(row[4])
    dtype = None
    if ndim >= 0:
        text = _unpack(row[3])
        try:
            dt = np.dtype(text)
            dtype = dt.name if dt.isnative else f"{dt.name} ({text}, byte order not native)"
        except TypeError:
            dtype = text
    return {"call": _COLLECTIVES[int(row[0])] if 0 <= row[0] < len(_COLLECTIVES) else f"collective #{row[0]}",
            "op": _unpack(row[1]) if row[1] != -1 else None,
            "src": int(row[2]) if row[2] >= 0 else None,
            "dtype": dtype,
            "shape": tuple(int(n) for n in row[_HEADER:_HEADER + ndim]) if ndim >= 0 else None}


def _call_text(c: dict) -> str:
    args = [f"op={c['op']}"] if c["op"] is not None else []
    args += [f"src={c['src']}"] if c["src"] is not None else []
    text = f"called {c['call']}({', '.join(args)})"
    if c["shape"] is not None:
        text += f" with dtype {c['dtype']} and shape {c['shape']}"
    return text


def _ranks(ranks: list[int]) -> str:
    """'rank 3', or 'ranks 0-2, 5' for several."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return f"rank {text}" if len(ranks) == 1 else f"ranks {text}"
