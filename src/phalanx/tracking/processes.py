"""Whether a process of this machine still runs: the one helper the SDK, ingest, ``phalanx stop``
and the CLI share. Standard library only (it ships in the SDK copy experiments receive)."""

from __future__ import annotations

import os


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
    except (OSError, IndexError):
        return True
