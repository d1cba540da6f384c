"""free_port: a port nothing listens on, from below the kernel's ephemeral range, so no retrying
client's own source port can ever be it (a TCP self-connect would hold it and the server meant to
listen there would fail with 'address in use')."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from phalanx.machine import ports


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


@pytest.mark.parametrize(
    "line",
    [
        "OSError: [Errno 98] Address already in use",
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network"
        " address. port: 15001, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
    ],
)
def test_a_console_that_ends_with_a_failed_bind_says_address_in_use(tmp_path: Path, line: str) -> None:
    log = tmp_path / "master.log"
    log.write_text("x" * (2 * ports.TAIL_BYTES) + "\nTraceback (most recent call last):\n" + line + "\n")
    assert ports.address_in_use(log) == (True, None)  # no port was picked for it


def test_a_console_without_a_failed_bind_or_no_console_says_nothing(tmp_path: Path) -> None:
    log = tmp_path / "master.log"
    log.write_text("address already in use\n" + "x" * (2 * ports.TAIL_BYTES))  # long ago, not at the end
    assert ports.address_in_use(log) == (False, None)
    assert ports.address_in_use(tmp_path / "missing.log") == (False, None)


def test_a_console_that_names_a_probed_port_in_use_lost_it(tmp_path: Path) -> None:
    log = tmp_path / "master.log"
    torch_said = (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network"
        " address. port: 23456, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
    )
    log.write_text(f"epoch 1 on 10.0.0.23456\n{torch_said}\n")
    assert ports.address_in_use(log, picked=(23456, 24000)) == (True, 23456)
    assert ports.address_in_use(log, picked=(24000,)) == (True, None)  # not a port Phalanx picked
    log.write_text("rank 0 listens on 23456\nOSError: [Errno 98] Address already in use\n")
    assert ports.address_in_use(log, picked=(23456,)) == (True, None)  # the failing line names none
    log.write_text("port: 23456\nall good\n")
    assert ports.address_in_use(log, picked=(23456,)) == (False, None)
    assert ports.address_in_use(tmp_path / "none.log", picked=(23456,)) == (False, None)


def test_an_earlier_attempts_failed_bind_is_not_this_attempts(tmp_path: Path) -> None:
    # one console file holds every attempt's lines: the group started again after attempt 1 lost its
    # port, and attempt 2 failed on the user's own error, which is no "address in use"
    log = tmp_path / "master.log"
    first = "OSError: [Errno 98] Address already in use: port 23456\n"
    log.write_text(first + "Traceback (most recent call last):\nZeroDivisionError: division by zero\n")
    assert ports.address_in_use(log, picked=(23456,)) == (True, 23456)  # the whole file: attempt 1's
    assert ports.address_in_use(log, picked=(23456,), since=len(first)) == (False, None)
