"""Standard streams that cannot take a command down: ``phalanx run ... 2>&1 | head -3``, a ``less``
quit with ``q``, a closed terminal (EIO) or a full disk behind ``> log`` end the echo, not the
experiment being supervised.

After the first failed write the stream's file descriptor is pointed at /dev/null, so nothing else
(Rich's refresh thread, the interpreter's flush at exit) meets the broken pipe again: the command
finishes as it would have with the terminal still open and exits with its own status.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, TextIO


class GuardedStream:
    """Wraps a text stream; writes after a failure are dropped without a word."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except (OSError, ValueError):
                self._silence()
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._silence()

    def _silence(self) -> None:
        self.broken = True
        with contextlib.suppress(OSError, ValueError):
            fd = self._stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, fd)
            finally:
                os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_std_streams() -> None:
    """Make sys.stdout and sys.stderr GuardedStreams (once)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, GuardedStream):
            setattr(sys, name, GuardedStream(stream))
