"""The reverse proxy in front of services: ``/services/ID/...`` forwarded to the service's Unix socket.

Policy (phalanx.server.policy, scope ``service``) has checked the caller's role in the service's
project before a request gets here. What the service receives carries none of the caller's
credentials (no Cookie, no Authorization: a service's process is the project's, not the caller's);
what it answers sets no cookie on the server's origin. Bodies are forwarded as they are (a
compressed answer stays compressed, its Content-Encoding kept).
"""

from __future__ import annotations

from collections.abc import Iterable

import httpx
from fastapi import Request, Response

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
    }
)
DROPPED_RESPONSE = frozenset(
    {"set-cookie", "connection", "keep-alive", "transfer-encoding", "trailer", "upgrade", "content-length"}
)
TIMEOUT = httpx.Timeout(60.0, connect=10.0)


def _kept(headers: Iterable[tuple[str, str]], dropped: frozenset[str]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers if k.lower() not in dropped]


async def forward(request: Request, socket: str) -> Response:
    """The service's answer to ``request`` (502 when it cannot be reached)."""
    transport = httpx.AsyncHTTPTransport(uds=socket)
    async with httpx.AsyncClient(transport=transport, timeout=TIMEOUT) as client:
        outgoing = client.build_request(
            request.method,
            httpx.URL(scheme="http", host="service", path=request.url.path, query=request.url.query.encode()),
            headers=_kept(request.headers.items(), DROPPED_REQUEST),
            content=await request.body(),
        )
        try:
            answer = await client.send(outgoing, stream=True)
            try:
                body = b"".join([chunk async for chunk in answer.aiter_raw()])
            finally:
                await answer.aclose()
        except httpx.HTTPError as exc:
            return Response(
                f"the service did not answer ({type(exc).__name__}); it may be starting or have ended:"
                " `phalanx tensorboard ls` lists those that run\n",
                status_code=502,
                media_type="text/plain",
            )
    response = Response(content=body, status_code=answer.status_code)
    for key, value in _kept(answer.headers.multi_items(), DROPPED_RESPONSE):
        response.headers.append(key, value)
    return response
