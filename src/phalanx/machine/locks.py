"""Whole-life locks of a process: an exclusive ``flock`` on a file, held until the holder exits.

The kernel releases such a lock when its holder dies (SIGKILL included), so a lock that can be
taken means that nobody holds it any more: it answers "does the process that took it still run?"
without a pid that may have been reused. Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

TRIES = 10  # ``held`` tests the lock by holding it shared for a moment: a holder starting then retries
PAUSE = 0.02


def hold(path: Path) -> int | None:
    """Take the lock on ``path`` for the rest of this process's life and return its fd (keep it
    open; it is not inherited by processes this one starts), or None when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    for attempt in range(TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if attempt + 1 < TRIES:
                time.sleep(PAUSE)
            continue
        return fd
    os.close(fd)
    return None


def held(path: Path) -> bool:
    """Whether a live process holds the lock on ``path`` (tested by trying it for a moment)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
