"""Free TCP ports on the loopback interface, for tests and for the local backend's rendezvous.

The ports are taken from below the kernel's ephemeral range when there is room. A port from that
range can become the *source* port of another process's outgoing connection, and a client that
retries a port nobody listens on yet (a worker reaching the master's rendezvous store before it is
up, a client retrying a server that restarts) can then connect to itself (TCP simultaneous open):
it holds the port, and the server that should listen there fails with "address in use".

Probing (bind, close, hand over the number) is racy: another process can take the port between the
probe and the real bind. Where Phalanx binds itself (`phalanx server`), it binds the port it is
given and says so when it is taken. The rendezvous ports are bound by a child, torch's TCPStore in
the master replica, which takes a number (MASTER_PORT), not a socket: a probe is the only way to
choose one for it. The window is kept small (the port is outside the ephemeral range, picked at
random) and, when it is lost, the replica's failure says "address in use" (``address_in_use``)
instead of only an exit code; when its console names the very port Phalanx picked (torch's TCPStore
does: ``port: N ... EADDRINUSE``) and the port is still held once the replica has ended (another
process's, not the job's own), the probe was lost and the supervisor starts the group again on new
ports.
"""

from __future__ import annotations

import random
import re
import socket
from collections.abc import Collection
from pathlib import Path

RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000  # below this, well-known and registered services are more common
IN_USE_MARKS = ("eaddrinuse", "address already in use")  # torch's TCPStore, Python's OSError
TAIL_BYTES = 64 * 1024


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now, outside the ephemeral range when possible (random, so
    parallel callers rarely meet; the kernel picks one if no such port is free)."""
    low = _ephemeral_low()
    if low - 1 > LOWEST:
        for _ in range(64):
            port = random.randint(LOWEST, low - 1)
            if _bindable(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when it cannot be read)."""
    try:
        return int(RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def still_taken(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something holds ``port`` now: asked once a replica that failed binding it has ended,
    a port still taken was another process's; a free one was its own (it bound it twice)."""
    return not _bindable(host, port)


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def address_in_use(log: Path, picked: Collection[int] = (), since: int = 0) -> tuple[bool, int | None]:
    """Whether the end of a replica's console says a bind failed because the address was in use,
    and the port of ``picked`` (those Phalanx probed for it) that a line saying so names, if one
    does: that probe was lost to another process before the replica bound it. ``since``: where
    this attempt's part of the console starts (the file keeps every attempt's, one after another:
    an earlier attempt's lost port is not this one's failure)."""
    try:
        with log.open("rb") as f:
            f.seek(max(since, f.seek(0, 2) - TAIL_BYTES))
            tail = f.read().decode("utf-8", "replace").lower()
    except OSError:
        return False, None
    lines = [line for line in tail.splitlines() if any(mark in line for mark in IN_USE_MARKS)]
    if not lines:
        return False, None
    named = {int(n) for line in lines for n in re.findall(r"(?<![\d.])(\d{2,5})(?![\d.])", line)}
    return True, next((port for port in picked if port in named), None)
