"""One controller per group at a time: an exclusive ``flock`` on ``PHALANX_HOME/groups/ID/
controller.lock``, held for the controller's whole life.

Two `phalanx group resume ID` started together, or a `group resume` beside the controller that
`group run --detach` is still starting, both pass the "is a controller running?" check of the
group's record (neither has written its pid yet). The lock is what decides: the first to take it
runs, the other exits with a ``ControllerRunning`` (exit 2) before it has touched the study or the
store. The kernel releases the lock when its holder dies, SIGKILL included, so a killed controller
never leaves a stale lock behind for `group resume` to trip on. The file's content is the holder's
pid, only to name it in the loser's message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from phalanx.errors import UsageError

LOCK_FILE = "controller.lock"
PROBE_TRIES = 10  # (x PROBE_PAUSE: far longer than a probe holds the lock, far shorter than a controller)
PROBE_PAUSE = 0.02


class ControllerRunning(UsageError):
    """Another controller holds the group's lock (a usage mistake: exit 2, HTTP 400)."""


@contextlib.contextmanager
def controller_lock(folder: Path, group_id: str) -> Iterator[int]:
    """Hold the group's controller lock for the ``with`` block, or raise ControllerRunning at once
    (never waits: a second controller has nothing to wait for). Yields the lock's fd: a process
    forked meanwhile (a trial's supervisor) must close it, or it would hold the lock on."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        if not _take(fd):
            raise ControllerRunning(busy(group_id, _read_pid(fd)))
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield fd
    finally:
        os.close(fd)  # releases the lock (the kernel does the same if this process dies)


def _take(fd: int) -> bool:
    """Take the lock, or False when a controller holds it. A few quick tries, not one: ``holder``
    (`group resume`, `group stop`) tests the lock by holding it shared for a moment, and a
    controller starting in that moment must not take the probe for a rival."""
    for attempt in range(PROBE_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if attempt + 1 < PROBE_TRIES:
                time.sleep(PROBE_PAUSE)
            continue
        return True
    return False


def busy(group_id: str, pid: int | None) -> str:
    """What a second controller (or `group resume` beside a running one) is told."""
    who = f" (pid {pid})" if pid and pid > 0 else ""
    return (
        f"group {group_id}: another controller already runs it{who}; nothing to resume:"
        f" `phalanx group get {group_id}` shows its trials, `phalanx group stop {group_id}` ends it"
    )


def holder(folder: Path) -> int | None:
    """The pid of the controller holding the lock of the group in ``folder``; None when none does
    (tested by trying the lock, so a dead holder never counts)."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or -1
        return None
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or "0") or None
    except (OSError, ValueError):
        return None
