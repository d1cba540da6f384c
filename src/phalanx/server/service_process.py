"""A service's process as ``phalanx.server.services`` sees it: alive or not, its status, its end."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Protocol


class Process(Protocol):
    """A service's process as the services see it."""

    def alive(self) -> bool: ...

    def status(self) -> int | None:
        """Its exit status once it ended (None while it runs)."""
        ...

    def end(self) -> None:
        """Stop it (and what it started) and wait for it; nothing when it has ended."""
        ...


class Spawned:
    """A service's process this server started, in a process group (a box: bubblewrap's own)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen

    def alive(self) -> bool:
        return self.popen.poll() is None

    def status(self) -> int | None:
        return self.popen.poll()

    def end(self) -> None:
        """SIGTERM to its process group (a box: bubblewrap, whose box dies with it), then SIGKILL
        after 10 s."""
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


def tail(path: Path, lines: int = 5) -> str:
    """The last ``lines`` lines of a service's output, on one line (why its start failed)."""
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:]) or "(no output)"
    except OSError:
        return "(no output)"
