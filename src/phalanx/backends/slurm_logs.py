"""A Slurm job's process logs, as the engine (root, on a server) reads them: incrementally, never
through a link the job planted, a slice at a time, and a line without end cut as a local replica's
reaper cuts it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from phalanx.backends.logfiles import Lines
from phalanx.machine.box import open_inside

LOG_READ_BYTES = 4 << 20  # the most read of a process's log at a time


class LogFile:
    """One process's log file, read incrementally into whole lines. A requeued job's script moves
    the file to attempts/<n>/ and its tasks start a new one: that one is read from its start."""

    def __init__(self, path: Path, prefix: str) -> None:
        self.path, self.prefix, self.pos, self.lines = path, prefix, 0, Lines()
        self.inode: int | None = None

    def read(self, final: bool) -> list[str]:
        """What was written since the last read, in whole lines: at most ``LOG_READ_BYTES`` a read
        (a job's sparse 8 GiB log costs it nothing; root reads it a slice at a time), and a line
        without end comes in pieces of ``logfiles.MAX_LINE``, as a local replica's does."""
        try:  # never through a link the job planted (see SlurmBackend._read)
            with os.fdopen(open_inside(self.path.parent.parent, f"logs/{self.path.name}"), "rb") as f:
                info = os.fstat(f.fileno())
                if self.inode is not None and info.st_ino != self.inode:
                    self.pos, self.lines = 0, Lines()  # a new attempt's file
                self.inode = info.st_ino
                f.seek(self.pos)
                chunk = f.read(LOG_READ_BYTES) if stat.S_ISREG(info.st_mode) else b""
        except FileNotFoundError:
            chunk = b""
        self.pos += len(chunk)
        parts = self.lines.feed(chunk)
        if final and len(chunk) < LOG_READ_BYTES:  # the end of the file: its last line
            parts += self.lines.end()
        return [self.prefix + p.decode("utf-8", "replace") for p in parts]
