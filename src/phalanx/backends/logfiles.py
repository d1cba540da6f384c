"""Following a replica's log file as it grows: the one reader the local and Slurm engines share."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

# The local engine's reaper writes a replica's stderr lines into its one log file (in the order they
# came) behind this mark, an OSC escape a terminal shows as nothing: whoever reads the file back
# (the supervisor's tail) takes it off with ``split_stream`` and records the line as stderr.
STDERR_MARK = "\x1b]phalanx;stderr\x07"
STDERR_MARK_BYTES = STDERR_MARK.encode()
MAX_LINE = 1 << 20  # bytes of a line without end kept before it is given as a line (progress bars)


class Lines:
    """Whole lines (without their newline) out of a stream's chunks: a line longer than ``most``
    bytes (one that never ends: a progress bar, or a job's 8 GiB of zeros) comes in pieces of
    ``most``, and what waits for its end is one growing buffer, never copied per chunk."""

    def __init__(self, most: int = MAX_LINE) -> None:
        self.most, self.pending = most, bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        out: list[bytes] = []
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            self.pending += chunk[start:end]
            out += self._pieces()
            out.append(bytes(self.pending))
            self.pending.clear()
            start = end + 1
        self.pending += chunk[start:]
        out += self._pieces()
        return out

    def end(self) -> list[bytes]:
        """The last line, had it no newline."""
        last = [bytes(self.pending)] if self.pending else []
        self.pending.clear()
        return last

    def _pieces(self) -> list[bytes]:
        """Full pieces of a line over ``most`` bytes (the rest waits)."""
        out = []
        while len(self.pending) > self.most:
            out.append(bytes(self.pending[: self.most]))
            del self.pending[: self.most]
        return out


def split_stream(line: str) -> tuple[str, str]:
    """("stderr", text) for a line the reaper marked, ("stdout", line) for any other."""
    if line.startswith(STDERR_MARK):
        return "stderr", line[len(STDERR_MARK) :]
    return "stdout", line


def follow_file(
    path: str | Path, offset: int = 0, ended: Callable[[], bool] | None = None, poll: float = 0.05
) -> Iterator[str]:
    """Lines (decoded, without newlines) of ``path`` from byte ``offset`` on. Without ``ended``:
    what the file holds now. With it: keeps reading (sleeping ``poll`` seconds when nothing is
    new) until ``ended()`` is true, asked before each read so no line written before the end is
    missed, then yields the last partial line too. A file that does not exist yet reads as empty."""
    pending = b""
    pos = offset
    while True:
        done = ended is None or ended()
        try:
            with open(path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        pos += len(chunk)
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            yield line.decode("utf-8", "replace")
        if done:
            if pending:
                yield pending.decode("utf-8", "replace")
            return
        if not chunk:
            time.sleep(poll)
