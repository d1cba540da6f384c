"""Registering through a server waits for the server's check of the model (a process of its own that
may run 5 minutes, after its turn), not for a request's usual 2 minutes of silence: the command used
to end with "cannot reach the server" while the server went on and registered the model."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.apiclient import TIMEOUT, Client
from phalanx.registry.parity_process import CHECK_SECONDS
from phalanx.registry.remote import RemoteRegistry


class Sent(Exception):
    pass


class RecordingClient(Client):
    """A server's client that records how long each request may stay silent (no HTTP)."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9", None)
        self.waits: list[tuple[str, float]] = []

    def send(self, method: str, path: str, doc: Any = None, timeout: float = TIMEOUT) -> Any:
        self.waits.append((path, timeout))
        raise Sent


def test_a_registration_waits_for_the_servers_check_of_the_model() -> None:
    client = RecordingClient()
    with pytest.raises(Sent):
        RemoteRegistry(client).register("3f2a9c41d0e2/digits", "digits")
    [(path, wait)] = client.waits
    assert path == "/models/digits/versions"
    assert wait > CHECK_SECONDS > TIMEOUT
