"""How a group's controller sleeps between passes: until a trial's end is recorded, one of its
supervisors exits, or the poll interval passes.

Why: a 0.3 s poll made every freed slot wait up to 0.3 s (more under load) before the next trial
started. Each trial's supervisor writes a byte to the group's ``wake.fifo`` right after it
recorded the outcome (``LaunchOptions.notify``), and a supervisor that is the controller's own
child also wakes it when it exits (a pidfd: a launch that failed before recording anything).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import time
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

FIFO = "wake.fifo"  # groups/ID/wake.fifo


class Waker:
    """The controller's sleep. ``enabled`` False: a plain sleep (the bench's "before")."""

    def __init__(self, folder: Path, enabled: bool = True) -> None:
        self.path = folder / FIFO
        self.enabled = enabled
        self._fifo: tuple[int, int] | None = None  # its read and write ends
        self._pidfds: dict[int, int] = {}  # supervisor pid -> its pidfd (readable once it exited)

    @property
    def notify(self) -> str | None:
        """What a trial's supervisor is told to write to (None: nothing to wake)."""
        return str(self.path) if self._fifo is not None else None

    def open(self) -> None:
        """Make and open the FIFO. The controller keeps a write end open itself, so the read end
        never reports end-of-file between trials (that would make every wait return at once)."""
        if not self.enabled:
            return
        try:
            with contextlib.suppress(FileExistsError):
                os.mkfifo(self.path, 0o600)
            read = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            write = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:  # a file system without FIFOs: polling still works
            log.info("no wake-up FIFO at %s (%s): polling", self.path, exc)
            return
        self._fifo = (read, write)

    def fds(self) -> list[int]:
        """Every fd this holds: what a supervisor forked from the controller must close."""
        return [*self._pidfds.values(), *(self._fifo or ())]

    def wait(self, running: Iterable[int], timeout: float) -> None:
        """Sleep until a trial's end is written to the FIFO, one of the ``running`` supervisor pids
        (the controller's children, not yet seen ended) exits, or ``timeout`` passes."""
        running = set(running)
        for pid in set(self._pidfds) - running:
            os.close(self._pidfds.pop(pid))
        if not self.enabled:
            time.sleep(timeout)
            return
        for pid in running - set(self._pidfds):
            with contextlib.suppress(OSError, AttributeError):  # gone already, or no pidfds here
                self._pidfds[pid] = os.pidfd_open(pid)
        fds = list(self._pidfds.values()) + ([self._fifo[0]] if self._fifo else [])
        if not fds:
            time.sleep(timeout)
            return
        ready, _, _ = select.select(fds, [], [], timeout)
        if self._fifo is not None and self._fifo[0] in ready:
            with contextlib.suppress(OSError):  # drained: the next byte wakes the next wait
                while os.read(self._fifo[0], 4096):
                    pass

    def close(self) -> None:
        for fd in self.fds():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._pidfds.clear()
        self._fifo = None
