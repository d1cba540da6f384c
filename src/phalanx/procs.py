"""This machine's processes: whether one runs (``pid_alive``), its start time (with the pid, it names
one process for good), and process records a stop may trust. The one place for these: the SDK
(a copy of this module ships with it: standard library only), ingest, stops, the queue's ledger,
the local engine and the reconciler all use it.

Process records a stop may trust: ``<PHALANX_HOME>/runs/<id>/<name>`` holding "pid start-time".

Why: the server and ``phalanx stop`` signal processes. A pid that arrived through ingest (anyone who
can call the API can send one) must never be signalled, and a pid written by Phalanx itself may
since have been reused by another process. So only files under ``runs/<id>`` (written by the
supervisor or a plain script's ``Task.init`` on this machine, never by the server) name a process,
and the process must still have the start time recorded with it (``/proc/<pid>/stat`` field 22).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` on this machine still runs. A zombie (ended, not yet reaped by its
    parent) does not; a process we may not signal (another user's) does. True when unsure."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        # reaped between the signal and the read: gone (unless there is no /proc to read at all)
        return not os.path.exists("/proc/self/stat")
    except (OSError, IndexError):
        return True


def pid_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP, SIGTSTP, a debugger)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None when it does not exist)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:
        if fields[0] == "Z":  # ended, not yet reaped: nothing to signal
            return None
        return int(fields[19])  # field 22 of stat; fields here start at field 3
    except (IndexError, ValueError):
        return None


def record_process(path: Path, pid: int | None = None) -> None:
    """Write "pid start-time host" for ``pid`` (default: this process) atomically at ``path``."""
    pid = os.getpid() if pid is None else pid
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # two writers never share one
    tmp.write_text(f"{pid} {start_time(pid) or 0} {socket.gethostname()}\n")
    os.replace(tmp, path)


def recorded_process(path: Path) -> int | None:
    """The pid ``path`` records when that very process still runs (same start time); else None."""
    try:
        parts = path.read_text().split()
        pid = int(parts[0])
        started = int(parts[1]) if len(parts) > 1 else None
    except (OSError, ValueError, IndexError):
        return None
    if pid <= 1 or (len(parts) > 2 and parts[2] != socket.gethostname()):
        return None  # another machine's process (a shared home) is not ours to signal
    now = start_time(pid)
    if now is None or started is None or now != started:
        return None
    return pid


def recorded_but_gone(path: Path) -> int | None:
    """The pid ``path`` records when that process of this machine no longer runs (or its pid now
    runs another program); None while it runs, without a record, or for another machine's."""
    try:
        parts = path.read_text().split()
        pid = int(parts[0])
    except (OSError, ValueError, IndexError):
        return None
    if len(parts) > 2 and parts[2] != socket.gethostname():
        return None
    return None if recorded_process(path) == pid else pid
