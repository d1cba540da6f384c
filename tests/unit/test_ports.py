"""free_port: a port nothing listens on, from below the kernel's ephemeral range, so no retrying
client's own source port can ever be it (a TCP self-connect would hold it and the server meant to
listen there would fail with 'address in use')."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from phalanx import ports


def test_ports_come_from_below_the_ephemeral_range_and_can_be_bound() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    if low <= ports.LOWEST + 1:
        pytest.skip(f"no room below this machine's ephemeral range (it starts at {low})")
    for _ in range(20):
        port = ports.free_port()
        assert ports.LOWEST <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        picks = iter([taken, taken, 15_001])
        monkeypatch.setattr(ports, "_ephemeral_low", lambda: 60_000)
        monkeypatch.setattr(ports.random, "randint", lambda a, b: next(picks))
        assert ports.free_port() == 15_001


def test_without_room_below_the_range_the_kernel_picks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    wide = tmp_path / "range"
    wide.write_text("1024\t65535\n")
    monkeypatch.setattr(ports, "RANGE_FILE", wide)
    port = ports.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
