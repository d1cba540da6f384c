"""The processes of one local launch unit, found without its leader.

A unit's reaper leads a process group (its pid) and is the subreaper of everything the replica
starts; it is also the process a fault kills. Once it is gone, its processes are reparented to
whatever reaps orphans on this machine and would run on unseen, holding cores the ledger has handed
to the next experiment. So the engine, which outlives the reaper, finds them itself in /proc, by two
mark that needs no leader: ``PHALANX_UNIT`` in the process's environment, set for every process the
unit starts (a child that called setsid and left the group still carries it; a leader forked from its
supervisor shows the supervisor's environment in /proc, and is never looked for by it). While the
leader lives, the members of its process group count too (a process that cleared its environment);
once it is dead the group's number could be reused by an unrelated process, so it is not trusted.

Zombies are left out: they hold no cores and cannot be signalled anyway.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable

ENV = "PHALANX_UNIT"


def marker(handle: str, unit: str) -> str:
    """The value of ``PHALANX_UNIT`` for a unit of one attempt (unique on this machine)."""
    return f"{handle}/{unit}"


def _stat(pid: str) -> tuple[str, int] | None:
    """(state, process group) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


def _carries(pid: str, mark: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return mark in f.read().split(b"\0")
    except OSError:  # gone, or not ours to read (then not the unit's either)
        return False


def find(mark: str, pgid: int | None = None, exclude: Iterable[int] = ()) -> list[int]:
    """Live processes carrying ``mark``, and members of process group ``pgid`` when given (only
    while the group's leader is known to live)."""
    wanted = f"{ENV}={mark}".encode()
    skip = {os.getpid(), *exclude}
    out: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        stat = _stat(entry.name)
        if stat is None or stat[0] == "Z":
            continue
        if (pgid is not None and stat[1] == pgid) or _carries(entry.name, wanted):
            out.append(int(entry.name))
    return out


def signal_all(pids: Iterable[int], sig: int) -> None:
    """Send ``sig`` to each process (a stopped one is continued, so it gets a SIGTERM now)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            if sig == signal.SIGTERM:
                os.kill(pid, signal.SIGCONT)
