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
