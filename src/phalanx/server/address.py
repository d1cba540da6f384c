"""Where this home's `phalanx server` listens, so `phalanx run` can name the real address.

`phalanx server` writes ``<PHALANX_HOME>/server.json`` (its URL, pid and that pid's start time, and
the store it serves) when it starts, and removes it when it returns normally. A file left by a
server that ended by a signal (uvicorn re-raises SIGTERM after its shutdown, so no `finally` runs)
or was killed is ignored: its pid is gone or now names another process. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from phalanx.machine.procs import Seen, judge, start_time

FILE = "server.json"


def local_url(host: str, port: int) -> str:
    """The URL a user on this machine opens: a wildcard address is reached through loopback."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


@contextlib.contextmanager
def recorded(home: Path, url: str, database_url: str) -> Iterator[None]:
    """Record the server's address for as long as the block runs (best effort: a home this process
    may not write only loses the hint)."""
    path = home / FILE
    doc = {"url": url, "pid": os.getpid(), "start": start_time(os.getpid()), "database_url": database_url}
    try:
        home.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{FILE}.{os.getpid()}")
        tmp.write_text(json.dumps(doc))
        tmp.replace(path)
    except OSError:
        pass
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("pid") == os.getpid():  # not a newer server's
                path.unlink()


def running_url(home: Path, database_url: str) -> str | None:
    """The URL of the server running over this home's store, or None (none runs, or it serves
    another store)."""
    try:
        doc = json.loads((home / FILE).read_text())
        pid, url = int(doc["pid"]), str(doc["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if doc.get("database_url") != database_url:
        return None
    start = doc.get("start")
    if not isinstance(start, int) or judge(pid, start) is not Seen.RUNS:
        return None
    return url
