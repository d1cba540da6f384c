"""Services without a process, for the server's unit tests (tests/unit starts none): each fake
board of project A answers 200 from a thread on a Unix socket, and ``started_without_a_process``
makes ``Services.tensorboard`` list such a board instead of starting TensorBoard. The real start
is tests/integration/server/test_services.py's."""

from __future__ import annotations

import http.server
import secrets
import shutil
import socketserver
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from phalanx.domain import Resources
from phalanx.server.service_record import Service
from phalanx.server.service_spawn import Instance, ServiceFailed
from phalanx.server.services import Services
from phalanx.services.boards import Board
from phalanx.services.targets import Target
from phalanx.store.accounts import Role
from phalanx.store.base import Store
from phalanx.store.registry_records import ModelRef


class _Answers200(http.server.BaseHTTPRequestHandler):
    """200 "ok", trying to set a cookie; what it was sent is kept in ``SEEN`` (the last request)."""

    def _ok(self) -> None:
        SEEN.clear()
        SEEN.update(path=self.path, headers=dict(self.headers.items()))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.send_header("Set-Cookie", "phalanx_session=planted; Path=/")
        self.send_header("Clear-Site-Data", '"cookies"')
        self.send_header("X-Board", "fake")
        self.end_headers()
        self.wfile.write(b"ok")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _ok

    def log_message(self, *args: object) -> None:
        pass


SEEN: dict[str, object] = {}
RESPAWNED: list[int] = []  # the slots a fake served model was asked to start again, in order
RESPAWN_FAILS: list[bool] = []  # not empty: starting a fake model's process again fails
STARTED_WITH: dict[str, str] = {}  # the inputs' environment the last fake notebook started with


class _UnixHttp(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class FakeProcess:
    """A fake board's "process": alive until ended (the thread server stays for the next one)."""

    def __init__(self) -> None:
        self.ended = False

    def alive(self) -> bool:
        return not self.ended

    def status(self) -> int | None:
        return 0 if self.ended else None

    def end(self) -> None:
        self.ended = True


@dataclass
class FakeBoard:
    """Project A's services, each answering 200 from a thread on a Unix socket (no process)."""

    socket: Path

    def add(self, services: Services, store: Store) -> str:
        """A new one, listed: its id."""
        return services.add(self.make(store, "A", Target("project", "A"))).id

    def make(self, store: Store, project: str, target: Target) -> Service:
        """A new one: its own folder (what its stop removes) with a link to the one socket."""
        service_id = secrets.token_hex(6)
        own = self.socket.parent / service_id
        own.mkdir()
        (own / "board.sock").symlink_to(self.socket)
        return Service(
            id=service_id,
            kind="tensorboard",
            project=project,
            target=target,
            folder=own / "gone",
            instances=[Instance(own / "board.sock", FakeProcess())],
            board=Board(store, target, own / "gone"),
            started_by="root",
        )


@pytest.fixture
def fake_boards() -> Iterator[FakeBoard]:
    folder = Path(tempfile.mkdtemp(prefix="phalanx-policy-"))
    server = _UnixHttp(str(folder / "board.sock"), _Answers200)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakeBoard(folder / "board.sock")
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def started_without_a_process(fake_boards: FakeBoard, monkeypatch: pytest.MonkeyPatch) -> FakeBoard:
    """``Services.tensorboard``, ``notebook`` and ``model`` start a fake service (no process) when
    none runs; a fake model's processes are started again as ``RESPAWN_FAILS`` says."""

    def board(services: Services, project: str, target: Target, who: str) -> Service:
        return fake_boards.make(services.store, project, target)

    def notebook(
        services: Services,
        project: str,
        inputs: Mapping[str, str],
        who: str,
        python: Path | None = None,
        resources: Resources | None = None,
        code: bytes | None = None,
    ) -> Service:
        STARTED_WITH.clear()
        STARTED_WITH.update(inputs)
        service = fake_boards.make(services.store, project, Target("project", project))
        return replace(service, kind="notebook", role=Role.editor, board=None)

    def model(
        services: Services,
        project: str,
        ref: ModelRef,
        registry: object,
        who: str,
        replicas: int = 1,
        service_id: str | None = None,
        resources: Resources | None = None,
    ) -> Service:
        service = fake_boards.make(services.store, project, Target("model", str(ref)))
        socket = service.instances[0].socket
        RESPAWNED.clear()

        def respawn(slot: int) -> Instance:
            RESPAWNED.append(slot)
            if RESPAWN_FAILS:
                raise ServiceFailed("the model ended (status 1) before it listened: (a fake)")
            return Instance(socket, FakeProcess())

        instances = [Instance(socket, FakeProcess()) for _ in range(replicas)]
        return replace(
            service, kind="model", role=Role.viewer, board=None, instances=instances, respawn=respawn
        )

    monkeypatch.setattr(Services, "_start_tensorboard", board)
    monkeypatch.setattr(Services, "_start_notebook", notebook)
    monkeypatch.setattr(Services, "_start_model", model)
    RESPAWN_FAILS.clear()
    return fake_boards
