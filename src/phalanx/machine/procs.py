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

import enum
import os
import stat
from pathlib import Path

HOST = os.uname().nodename  # socket.gethostname()'s answer (both are uname's), without socket

# ``runs/<id>/ingester.pid``: the process whose ingester follows spool/<id> right now (the supervisor,
# or a plain script's `python -m phalanx.ingest --follow-pid`); while it runs, a read command leaves
# that folder to it (phalanx.readpass), and once it is gone the next read ingests what is left
INGESTER_RECORD = "ingester.pid"


class Seen(enum.StrEnum):
    """What this machine can tell of a recorded process."""

    RUNS = "runs"  # this very process still runs here
    GONE = "gone"  # it ended (or its pid now names another process, or another program)
    ELSEWHERE = "elsewhere"  # another machine's: it cannot be seen from here (a shared home)


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
    """Whether process ``pid`` is stopped by a signal (SIGSTOP, SIGTSTP: a suspended `phalanx run`)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return signal_stopped(fh.read())
    except OSError:
        return False


def signal_stopped(stat: str) -> bool:
    """Whether a ``/proc/<pid>/stat`` line says stopped by a signal ("T"). A tracing stop ("t") is
    not: a sampling profiler (py-spy) stops its target for every sample, and a flush that took that
    for a stopped ingester gave up at once while its points were being stored."""
    fields = stat.rsplit(")", 1)[-1].split()
    return bool(fields) and fields[0] == "T"


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


def judge(pid: int, start: int | None = None, host: str | None = None, program: bytes | None = None) -> Seen:
    """THE liveness check, used everywhere a recorded process is judged (a supervisor's pid file,
    a ledger entry, a group's controller, the server's address file, a plain script's pid file).

    ``start``: the start time recorded with the pid (``start_time``): a pid now used by another
    process is told apart by it; None when nothing was recorded (the pid alone, zombies gone).
    ``host``: the machine that recorded it ("" or None: this one). ``program``: bytes its command
    line must contain (b"phalanx"), when a pid without a start time could have been reused."""
    if host and host != HOST:
        return Seen.ELSEWHERE
    if pid <= 1:
        return Seen.GONE
    if start is not None:
        if start_time(pid) != start:
            return Seen.GONE
    elif not pid_alive(pid):
        return Seen.GONE
    if program is not None:
        try:
            if program not in Path(f"/proc/{pid}/cmdline").read_bytes():
                return Seen.GONE
        except OSError:
            return Seen.GONE
    return Seen.RUNS


def read_record(path: Path) -> tuple[int, int | None, str | None] | None:
    """A process record ("pid start-time host") as (pid, start, host); None if absent or damaged.
    A record without a start time (or with 0: it was gone when written) has start None."""
    try:
        parts = path.read_text().split()
        pid = int(parts[0])
        start = int(parts[1]) if len(parts) > 1 else None
    except (OSError, ValueError, IndexError):
        return None
    return pid, start, parts[2] if len(parts) > 2 else None


def started_at(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), None if it does not run (or is a zombie)."""
    ticks = start_time(pid)
    if ticks is None:
        return None
    try:
        with open("/proc/stat") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith("btime"))
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def record_process(path: Path, pid: int | None = None) -> None:
    """Write "pid start-time host" for ``pid`` (default: this process) atomically at ``path``."""
    pid = os.getpid() if pid is None else pid
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # two writers never share one
    tmp.write_text(f"{pid} {start_time(pid) or 0} {HOST}\n")
    os.replace(tmp, path)


def recorded_process(path: Path, program: bytes | None = None) -> int | None:
    """The pid ``path`` records when that very process still runs here (same start time); else None
    (gone, never recorded, recorded without a start time, or another machine's: not ours to signal)."""
    record = read_record(path)
    if record is None or record[1] is None:
        return None
    pid, start, host = record
    return pid if judge(pid, start, host, program) is Seen.RUNS else None


def recorded_but_gone(path: Path) -> int | None:
    """The pid ``path`` records when that process of this machine no longer runs (or its pid now
    runs another program); None while it runs, without a record, or for another machine's."""
    record = read_record(path)
    if record is None:
        return None
    pid, start, host = record
    if start is None:  # no start time: a pid alone names no process for sure, so it is not trusted
        return None if judge(pid, None, host) is Seen.ELSEWHERE else pid
    return pid if judge(pid, start, host) is Seen.GONE else None


def writer_gone(stream: str) -> bool:
    """True when spool ``stream`` was written by a process of this host that has exited (so its
    spool file will never grow again). False when unsure (another host, a stream named otherwise)."""
    from phalanx.spool import stream_writer  # why: `phalanx ls` imports this module: no spool

    pid = stream_writer(stream)
    return pid is not None and not pid_alive(pid)


def own_output_files() -> frozenset[tuple[int, int]]:
    """(device, inode) of the regular files this process's stdout and stderr go to (`phalanx run
    ... > run.log`): a snapshot of the folder they lie in leaves them out (``repro.snapshot``)."""
    found = set()
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.add((st.st_dev, st.st_ino))
    return frozenset(found)
