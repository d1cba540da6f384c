"""``served``: the real server app on a real loopback socket, served by uvicorn in a thread of this
process (no process started), for the CLI run in-process (tests/support/cli.py) against a server;
``door``: a test run once on each door, with that door's store (a module's own ``door`` overrides it)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn

from phalanx import logins
from phalanx.config import Settings
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store import open_store
from phalanx.store.base import Store

TOKEN = "the-servers-token-0123456789"


@dataclass(frozen=True)
class Served:
    url: str
    store: Store


@pytest.fixture
def served(tmp_path: Path, phalanx_home: Path) -> Iterator[Served]:
    """A token-guarded server with its own home (not the CLI's), on a socket bound here."""
    settings = ServerSettings(
        store=Settings(home=tmp_path / "server-home"),
        token=TOKEN,
        allowed_hosts=["127.0.0.1"],
        launch_workers=0,
    )
    store = open_store(settings.store)
    listener = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(settings, store), log_level="warning", lifespan="on"))
    serving = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    serving.start()
    try:
        while not server.started:  # start-up is a few ms of work; the thread says when it is done
            assert serving.is_alive(), "the server did not start"
            threading.Event().wait(0.01)
        yield Served(f"http://127.0.0.1:{listener.getsockname()[1]}", store)
    finally:
        server.should_exit = True
        serving.join(timeout=30)
        listener.close()
        store.close()


@pytest.fixture(params=["here", "server"])
def door(request: pytest.FixtureRequest, phalanx_home: Path) -> Store:
    """The store a test writes its experiments to: this machine's, or a served one logged in to (so
    the CLI's commands act there)."""
    if request.param == "here":
        store = open_store(Settings())
        request.addfinalizer(store.close)
        return store
    served: Served = request.getfixturevalue("served")
    logins.save(phalanx_home, logins.Login(served.url, TOKEN))
    return served.store
