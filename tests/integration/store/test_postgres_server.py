"""The PostgreSQL server the store tests start (tests/support/postgres.py), beside another test
worker that picks ports the same way (phalanx.machine.ports.free_port) at the same time."""

from __future__ import annotations

import socket

import pytest
from tests.support import postgres

from phalanx.machine import ports

pytestmark = pytest.mark.postgres


@pytest.fixture(autouse=True)
def _needs_postgres() -> None:
    reason = postgres.unavailable_reason()
    if reason:
        pytest.skip(reason)


def test_a_server_whose_port_is_taken_before_it_binds_starts_on_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as taken:  # another process bound the picked port before the postmaster
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        picks = iter([port])
        monkeypatch.setattr(postgres, "free_port", lambda: next(picks, None) or ports.free_port())
        server = postgres.start_postgres()
    try:
        assert server.port != port
        server.create_database()  # it answers there
    finally:
        server.stop()


def test_a_paused_servers_port_is_free_to_no_other_process_until_it_resumes() -> None:
    server = postgres.start_postgres()
    try:
        server.create_database()
        postgres.pause(server)
        assert not ports._bindable("127.0.0.1", server.port)  # free_port passes it by
        with pytest.raises(Exception):  # noqa: B017 (psycopg's: refused, as by a stopped server)
            server.create_database()
        postgres.resume(server)
        server.create_database()
    finally:
        server.stop()
