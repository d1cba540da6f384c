"""The proxy in front of a served model's replicas (phalanx.server.proxy.forward), in-process over
Unix sockets this test holds: a request that one replica never took (it died with the connection
waiting unaccepted in its queue, it refuses connections, its socket is gone) is answered by the
next; one that a replica took and then dropped is not sent again (502); none taking it is a 502
that says so."""

from __future__ import annotations

import asyncio
import socket
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Request, Response

from phalanx.server.proxy import forward

BODY = b'{"inputs": [[1.0]]}'


def _request() -> Request:
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/services/0123456789ab/v1/models/digits:predict",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"authorization", b"Bearer secret")],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("testserver", 80),
        "root_path": "",
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": BODY, "more_body": False}

    return Request(scope, receive)


class Replica:
    """A replica on a Unix socket: the bodies of the requests it read; ``answers``: whether it
    answers one it read (else it closes the connection without a word, as a crash does)."""

    def __init__(self, answers: bool = True) -> None:
        self.answers = answers
        self.bodies: list[bytes] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        self.bodies.append(await reader.readexactly(length))
        if self.answers:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 8\r\n\r\nanswered")
            await writer.drain()
        writer.close()
        await writer.wait_closed()


@asynccontextmanager
async def _listening(path: Path, replica: Replica) -> AsyncIterator[None]:
    server = await asyncio.start_unix_server(replica.serve, path=str(path))
    async with server:
        yield


def _dies_before_accepting(path: Path) -> socket.socket:
    """A replica whose process dies once a connection waits in its queue, before accepting it: the
    connection was made, and is then reset by the kernel."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    loop = asyncio.get_running_loop()

    def die() -> None:  # a waiting connection makes the listening socket readable
        loop.remove_reader(listener.fileno())
        listener.close()

    loop.add_reader(listener.fileno(), die)
    return listener


def _refuses(path: Path) -> None:
    """A replica that has ended: its socket file is left, and nothing listens there."""
    gone = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    gone.bind(str(path))
    gone.listen(1)
    gone.close()


def _run(scenario: Callable[[Path], Coroutine[Any, Any, Response]]) -> Response:
    with tempfile.TemporaryDirectory(prefix="phx-proxy-") as folder:  # a socket's path is short
        return asyncio.run(scenario(Path(folder)))


def test_a_request_waiting_on_a_replica_that_dies_is_answered_by_the_next() -> None:
    live = Replica()

    async def scenario(folder: Path) -> Response:
        dying = _dies_before_accepting(folder / "dying.sock")
        async with _listening(folder / "live.sock", live):
            answer = await forward(_request(), [folder / "dying.sock", folder / "live.sock"])
        assert dying.fileno() == -1  # it did die with the connection waiting
        return answer

    answer = _run(scenario)
    assert (answer.status_code, answer.body) == (200, b"answered")
    assert live.bodies == [BODY]


def test_a_replica_that_refuses_or_whose_socket_is_gone_passes_the_request_on() -> None:
    live = Replica()

    async def scenario(folder: Path) -> Response:
        _refuses(folder / "ended.sock")
        async with _listening(folder / "live.sock", live):
            return await forward(
                _request(), [folder / "gone.sock", folder / "ended.sock", folder / "live.sock"]
            )

    answer = _run(scenario)
    assert (answer.status_code, answer.body) == (200, b"answered")
    assert live.bodies == [BODY]


def test_a_request_a_replica_took_is_not_sent_again_when_it_drops_it() -> None:
    crashing, live = Replica(answers=False), Replica()

    async def scenario(folder: Path) -> Response:
        async with _listening(folder / "crashing.sock", crashing), _listening(folder / "live.sock", live):
            return await forward(_request(), [folder / "crashing.sock", folder / "live.sock"])

    answer = _run(scenario)
    assert answer.status_code == 502 and b"the service did not answer (RemoteProtocolError)" in answer.body
    assert (crashing.bodies, live.bodies) == ([BODY], [])


def test_no_replica_taking_the_request_is_a_502_that_says_so() -> None:
    async def scenario(folder: Path) -> Response:
        _refuses(folder / "ended.sock")
        _dies_before_accepting(folder / "dying.sock")
        return await forward(_request(), [folder / "ended.sock", folder / "dying.sock"])

    answer = _run(scenario)
    assert answer.status_code == 502
    said = bytes(answer.body).decode()
    assert said.startswith("none of the service's 2 processes took the request (ReadError)")
    assert "GET /api/v1/services" in said
