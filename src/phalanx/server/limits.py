"""Request body size limits, enforced while the body is read (not after it was buffered), and a
limit on how long a body may stall between two chunks (a client that declares 1 MiB and sends 10 bytes
would otherwise hold its request open for ever: it gets 408).

A declared Content-Length above the limit is refused at once; a body sent without one (chunked) is
counted as it arrives and refused as soon as it passes the limit. The refusal is an HTTPException, so
FastAPI's body parsing lets it through and the client gets 413 with the usual JSON error body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class PayloadTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=f"request body larger than the limit of {limit} bytes")


class BodyStalled(HTTPException):
    def __init__(self, seconds: float) -> None:
        super().__init__(
            status_code=408, detail=f"the request body stalled: nothing arrived for {seconds:g} seconds"
        )


class BodyLimitMiddleware:
    """``limit_for(path, method)`` gives the most bytes a request's body may have; ``idle_seconds``
    how long the body may pause between two chunks."""

    def __init__(
        self, app: ASGIApp, limit_for: Callable[[str, str], int], idle_seconds: float = 60.0
    ) -> None:
        self.app = app
        self.limit_for = limit_for
        self.idle_seconds = idle_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"], scope["method"])
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    await _refuse(send, limit)
                    return
        seen = 0
        complete = False

        async def counted() -> Message:
            nonlocal seen, complete
            if complete:  # after the body only a disconnect can come: a stream waits for it
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.idle_seconds)
            except TimeoutError:
                raise BodyStalled(self.idle_seconds) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise PayloadTooLarge(limit)
                complete = not message.get("more_body", False)
            return message

        await self.app(scope, counted, send)


async def _refuse(send: Send, limit: int) -> None:
    body = (
        b'{"error":"payload_too_large","message":"request body larger than the limit of '
        + str(limit).encode()
        + b' bytes"}'
    )
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
