"""What an environment build tells the experiment's console while pip works: each step as it
starts, pip's lines as they come (what is being collected and installed), and, while pip is
silent, a heartbeat at least every ``HEARTBEAT_SECONDS`` with the elapsed time and pip's last line.
A long build (TensorFlow, a Horovod wheel) is never a silent console. No process, no I/O: the
build (``buildenv``) feeds it what pip wrote, the caller hands it where lines go and a clock."""

from __future__ import annotations

import time
from collections.abc import Callable

HEARTBEAT_SECONDS = 30.0  # docs/environments.md promises a line at least this often (PHALANX_BUILD_HEARTBEAT)


class BuildProgress:
    """``say``: takes the lines of one look (shown and recorded together); ``clock``: monotonic
    seconds (a test's own); ``every``: the longest silence."""

    def __init__(
        self,
        say: Callable[[list[str]], None],
        clock: Callable[[], float] = time.monotonic,
        every: float = HEARTBEAT_SECONDS,
    ) -> None:
        self.say_lines = say
        self.clock = clock
        self.every = every
        self.started = clock()
        self.last_said = self.started
        self.last_line = ""  # pip's last non-blank line
        self.what = ""  # the step running now

    def elapsed(self) -> float:
        return self.clock() - self.started

    def note(self, text: str) -> None:
        """One line of the build's own (a step starts, a cached wheel is used)."""
        self._say([text])

    def step(self, what: str) -> None:
        """A step of the build starts (``what``: creating the venv, pip install of ...)."""
        self.what = what
        self._say([f"{what} ({self.elapsed():.0f} s in)"])

    def output(self, text: str) -> None:
        """What the step wrote since the last look (whole lines): its non-blank lines, as they are."""
        lines = [line.rstrip() for line in text.splitlines() if line.strip()]
        if lines:
            self.last_line = lines[-1].strip()
            self._say(lines)

    def tick(self) -> None:
        """A look with nothing new: a heartbeat when nothing was said for ``every`` seconds."""
        if self.clock() - self.last_said < self.every:
            return
        last = f"; pip's last line: {self.last_line}" if self.last_line else ""
        self._say([f"still building ({self.elapsed():.0f} s): {self.what or 'starting'}{last}"])

    def _say(self, lines: list[str]) -> None:
        self.last_said = self.clock()
        self.say_lines(lines)
