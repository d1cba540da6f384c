"""Free TCP ports on the loopback interface, for tests and for the local backend's rendezvous.

The ports are taken from below the kernel's ephemeral range when there is room. A port from that
range can become the *source* port of another process's outgoing connection, and a client that
retries a port nobody listens on yet (a worker reaching the master's rendezvous store before it is
up, a client retrying a server that restarts) can then connect to itself (TCP simultaneous open):
it holds the port, and the server that should listen there fails with "address in use".
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000  # below this, well-known and registered services are more common


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


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
