"""Following a replica's log file as it grows: the one reader the local and Slurm engines share."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path


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
