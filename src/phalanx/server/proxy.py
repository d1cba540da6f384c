"""The reverse proxy in front of services: ``/services/ID/...`` forwarded to the service's Unix socket,
HTTP requests (``forward``) and WebSockets (``forward_socket``: a notebook's kernel channels).

Policy (phalanx.server.policy, scope ``service``) has checked the caller's role in the service's
project before a request gets here. What the service receives carries none of the caller's
credentials (no Cookie, no Authorization: a service's process is the project's, not the caller's);
what it answers sets no cookie on the server's origin. Bodies are forwarded as they are (a
compressed answer stays compressed, its Content-Encoding kept).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import cast

import httpx
from fastapi import Request, Response, WebSocket
from starlette.websockets import WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.typing import Subprotocol

# RFC 9110 7.6.1's hop-by-hop fields, the caller's credentials, and what the proxy sets itself
DROPPED_REQUEST = frozenset(
    {
        "host",
        "cookie",
        "authorization",
        "connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        # the server checked that a browser's unsafe request comes from its own pages; the service
        # would compare the Origin with the Host the proxy sends (JupyterLab refuses a mismatch)
        "origin",
    }
)
# and what the server sets itself (Date, Server), and no cross-origin grant of the service's own
DROPPED_RESPONSE = frozenset(
    {
        "set-cookie",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "trailer",
        "upgrade",
        "content-length",
        "date",
        "server",
        "access-control-allow-origin",
        "access-control-allow-credentials",
        "access-control-allow-headers",
        "access-control-allow-methods",
        "access-control-expose-headers",
        # a service may not wipe what the browser keeps for the whole site (the server's session)
        "clear-site-data",
    }
)
TIMEOUT = httpx.Timeout(60.0, connect=10.0)
# a WebSocket's own handshake fields: the proxy makes its own
DROPPED_SOCKET = DROPPED_REQUEST | {
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
}
POLICY_VIOLATION, UNREACHABLE = 1008, 1011  # RFC 6455's close codes


def _kept(headers: Iterable[tuple[str, str]], dropped: frozenset[str]) -> list[tuple[str, str]]:
    """``headers`` less ``dropped`` and the fields a Connection header names (hop-by-hop too)."""
    pairs = list(headers)
    named = {f.strip().lower() for k, v in pairs if k.lower() == "connection" for f in v.split(",")}
    return [(k, v) for k, v in pairs if k.lower() not in dropped and k.lower() not in named]


async def forward(request: Request, sockets: Sequence[Path]) -> Response:
    """The service's answer to ``request`` from the first of ``sockets`` that takes it (a served
    model's replicas: one that has just died did not, and the next one answers), each tried once;
    502 when none can be reached, or when the one that took it fails before its answer ends."""
    body = await request.body()
    headers = _kept(request.headers.items(), DROPPED_REQUEST)
    if "accept-encoding" not in request.headers:  # else httpx would ask for gzip on the caller's behalf
        headers.append(("accept-encoding", "identity"))
    url = httpx.URL(scheme="http", host="service", path=request.url.path, query=request.url.query.encode())
    failure: httpx.HTTPError | None = None
    for socket in sockets:
        transport = httpx.AsyncHTTPTransport(uds=str(socket))
        async with httpx.AsyncClient(transport=transport, timeout=TIMEOUT) as client:
            outgoing = client.build_request(request.method, url, headers=headers, content=body)
            try:
                answer = await client.send(outgoing, stream=True)
            except httpx.HTTPError as exc:
                if not _not_taken(exc):
                    return _unreachable(exc)
                failure = exc  # the next one may take it
                continue
            try:
                content = b"".join([chunk async for chunk in answer.aiter_raw()])
            except httpx.HTTPError as exc:
                return _unreachable(exc)
            finally:
                await answer.aclose()
        response = Response(content=content, status_code=answer.status_code)
        for key, value in _kept(answer.headers.multi_items(), DROPPED_RESPONSE):
            response.headers.append(key, value)
        return response
    return _unreachable(failure, tried=len(sockets))


def _not_taken(exc: httpx.HTTPError) -> bool:
    """Whether the process behind the socket never took the request, so that another may answer it
    without it being done twice: its connection refused (it has ended) or its socket gone, or the
    connection reset before any of the answer came. On a Unix socket the kernel resets a connection
    only when the process at its end closed it with what was sent still unread: one waiting in the
    queue of a process that died before accepting it (its listening socket lives until the last of
    its threads has ended). A process that read the request and then closed or died gives an end of
    stream instead (RemoteProtocolError): that request is never sent again."""
    if isinstance(exc, httpx.ConnectError):
        return True
    if not isinstance(exc, httpx.ReadError | httpx.WriteError):
        return False
    # httpx's error, from httpcore's (its pool raises that one again "from None"), from anyio's,
    # from the socket's
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionResetError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _unreachable(exc: Exception | None, tried: int = 1) -> Response:
    said = f"the service did not answer ({type(exc).__name__})"
    if tried > 1:
        said = f"none of the service's {tried} processes took the request ({type(exc).__name__})"
    return Response(
        f"{said}; it may be starting or have ended:"
        " GET /api/v1/services (or the Services page) lists those that run\n",
        status_code=502,
        media_type="text/plain",
    )


async def forward_socket(
    websocket: WebSocket,
    socket: str,
    touch: Callable[[], None],
    allowed: Callable[[], Awaitable[bool]] | None = None,
) -> None:
    """Join ``websocket`` (not accepted yet) to the same path on the service's socket, both ways,
    until either side closes; ``touch`` on every message (the service is in use); ``allowed``
    asked before each of the caller's messages is passed on: once it says no, both are closed."""
    url = websocket.url
    target = f"ws://service{url.path}" + (f"?{url.query}" if url.query else "")
    asked = [Subprotocol(p) for p in websocket.scope.get("subprotocols") or ()]
    try:
        upstream = await unix_connect(
            socket,
            target,
            additional_headers=_kept(websocket.headers.items(), DROPPED_SOCKET),
            subprotocols=asked or None,
            open_timeout=30,
            max_size=None,
        )
    except (OSError, WebSocketException, TimeoutError):
        await websocket.close(code=UNREACHABLE)
        return
    async with upstream:
        await websocket.accept(subprotocol=cast(str | None, upstream.subprotocol))
        pumps = [
            asyncio.create_task(_to_service(websocket, upstream, touch, allowed)),
            asyncio.create_task(_to_caller(websocket, upstream, touch)),
        ]
        _, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pending:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
    with contextlib.suppress(Exception):  # the caller may have gone already
        await websocket.close()


async def _to_service(
    websocket: WebSocket,
    upstream: ClientConnection,
    touch: Callable[[], None],
    allowed: Callable[[], Awaitable[bool]] | None,
) -> None:
    with contextlib.suppress(WebSocketDisconnect, ConnectionClosed):
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            if allowed is not None and not await allowed():
                with contextlib.suppress(Exception):
                    await websocket.close(code=POLICY_VIOLATION)  # said before the pumps end it as 1000
                return
            touch()
            text = message.get("text")
            await upstream.send(text if text is not None else message.get("bytes") or b"")


async def _to_caller(websocket: WebSocket, upstream: ClientConnection, touch: Callable[[], None]) -> None:
    with contextlib.suppress(WebSocketDisconnect, ConnectionClosed, RuntimeError):
        async for data in upstream:
            touch()
            if isinstance(data, str):
                await websocket.send_text(data)
            else:
                await websocket.send_bytes(data)
