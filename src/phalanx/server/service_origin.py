"""An origin of its own for every service (docs/services.md#an-origin-per-service).

With ``phalanx server --service-origin 'https://{id}.svc.example.com'`` a service's pages are served
at ``https://<its id>.svc.example.com/services/ID/``, not on the server's origin. What a notebook's
author wrote then runs in the browser of whoever opens it on an origin that holds nothing of theirs:
the server's session cookie is host-only, so it is never sent there, and the server's own pages
refuse a request from another origin. One service cannot reach another's pages either: each has a
host of its own, and each host's pass is its own cookie.

A browser gets there in one hop through the server, as JupyterHub's subdomains do:

1. ``GET /services/ID/PATH`` on the server (the caller's session, roles checked as ever) answers
   with a redirect to the service's origin, carrying a **ticket**: random, good for one use, for
   that service and that caller, for ``TICKET_SECONDS``.
2. ``GET /_phalanx/enter?ticket=T&next=/services/ID/PATH`` on the service's origin redeems it for a
   **pass**: a host-only, HttpOnly cookie (``SERVICE_COOKIE``) of that origin alone, good for
   ``PASS_SECONDS``, then redirects to ``next``.
3. Every request there carries the pass: its holder's account and role in the service's project are
   checked again each time (a disabled account or a lost role is refused at once), and a WebSocket
   must come from the service's own origin. Without a pass a page is sent back to step 1.

A pass lasts as long as the browser session that asked for it (a logout ends it), and a kernel's
WebSocket is checked again while it is open (``RECHECK_SECONDS``). Requests there get the server's
body limit and access log, not its other checks (they are not the server's pages).

Tickets and passes live in the server's memory, as its services do (phalanx.server.service_passes):
after a restart a page's next navigation gets a new pass on its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import anyio
from fastapi import Request
from starlette.requests import ClientDisconnect
from starlette.responses import PlainTextResponse, RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from phalanx.errors import NotFound
from phalanx.server.limits import BodyLimitMiddleware
from phalanx.server.policy import Principal
from phalanx.server.proxy import POLICY_VIOLATION, forward, forward_socket
from phalanx.server.service_passes import PASS_SECONDS, Passes, ServiceOrigin
from phalanx.server.service_record import Service
from phalanx.server.services import Services
from phalanx.server.sessions import Sessions

SERVICE_COOKIE = "phalanx_service"
ENTER = "/_phalanx/enter"
RECHECK_SECONDS = 5.0  # an open kernel WebSocket's holder is checked again this often (on its messages)
# the service's answers: no sniffing, no Referer with its paths to other sites
HEADERS = [("x-content-type-options", "nosniff"), ("referrer-policy", "same-origin")]

access_log = logging.getLogger("phalanx.server.access")


class ServiceOriginMiddleware:
    """Serves the service hosts (the steps above); every other host goes on to ``app``.
    ``who``: the principal of a signed-in user (None: the server token's holder), or None when the
    account is gone or disabled; ``sessions``: the server's browser sessions (None: it keeps none);
    ``server_url``: where the server's own pages are; ``body_limit``, ``idle_seconds``: a request
    body's most bytes and longest pause."""

    def __init__(
        self,
        app: ASGIApp,
        origin: ServiceOrigin,
        passes: Passes,
        services: Services,
        who: Callable[[str | None], Principal | None],
        sessions: Sessions | None,
        server_url: str,
        body_limit: int,
        idle_seconds: float,
    ) -> None:
        self.app = app
        self.origin = origin
        self.passes = passes
        self.services = services
        self.who = who
        self.sessions = sessions
        self.server_url = server_url.rstrip("/")
        self.limited = BodyLimitMiddleware(
            self._serve, limit_for=lambda *_: body_limit, idle_seconds=idle_seconds
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = _header(scope, b"host") if scope["type"] in ("http", "websocket") else ""
        service_id = self.origin.service_of(host) if host else None
        if service_id is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._socket(WebSocket(scope, receive, send), service_id, host)
        else:
            await self.limited(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        started, status = time.monotonic(), [0]

        async def sent(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        request = Request(scope, receive)
        try:
            answer = await self._http(request, str(self.origin.service_of(_header(scope, b"host"))))
        except ClientDisconnect:  # the browser went away while sending: nobody to answer
            return
        for key, value in HEADERS:
            answer.headers.setdefault(key, value)
        try:
            await answer(scope, receive, sent)
        finally:
            client = (scope.get("client") or ("-", 0))[0]
            took = (time.monotonic() - started) * 1000
            host, method, path = _header(scope, b"host"), scope["method"], scope["path"]
            access_log.info('%s "%s %s%s" %s %.1fms', client, method, host, path, status[0] or "-", took)

    async def _http(self, request: Request, service_id: str) -> Any:
        path = request.url.path
        base = f"/services/{service_id}/"
        if path == ENTER and request.method == "GET":
            return self._enter(request, service_id, base)
        service = await self._reachable(_passes_in(request.headers.get("cookie", "")), service_id)
        if service is None:  # a browser without a pass (yet) goes to the server, which hands one
            if request.method in ("GET", "HEAD") and path == "/":
                return RedirectResponse(f"{self.server_url}{base}", status_code=303)
            if request.method in ("GET", "HEAD") and (path + "/").startswith(base):
                target = path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"{self.server_url}{target}", status_code=303)
            return PlainTextResponse(
                f"no pass to service {service_id} here: open {self.server_url}{base} (signed in)\n", 401
            )
        if path in ("/", base.rstrip("/")):
            return RedirectResponse(base, status_code=307)
        if not path.startswith(base):
            return PlainTextResponse(f"not found: this origin serves {base} only\n", 404)
        self.services.touch(service)
        return await forward(request, service.in_turn())

    def _enter(self, request: Request, service_id: str, base: str) -> Any:
        held = self.passes.redeem(request.query_params.get("ticket", ""), service_id)
        if held is None:
            return PlainTextResponse(
                f"this link to service {service_id} was used already or has expired: open "
                f"{self.server_url}{base} again\n",
                403,
            )
        wanted = request.query_params.get("next", base)
        safe = wanted.startswith(base) and "\\" not in wanted and not any(ord(c) < 32 for c in wanted)
        answer = RedirectResponse(wanted if safe else base, status_code=303)
        answer.set_cookie(
            SERVICE_COOKIE,
            held,
            max_age=int(PASS_SECONDS),
            path="/",
            httponly=True,
            samesite="lax",
            secure=self.origin.scheme == "https",
        )
        return answer

    async def _reachable(self, held: list[str], service_id: str) -> Service | None:
        """The service, when one of ``held`` (a browser may carry a second cookie of that name, set
        for a parent domain by a sibling host's page) is a live pass to it whose session still lives
        and whose holder still has its role there."""
        grants = [g for h in held if (g := self.passes.grant(h, service_id)) is not None]
        for grant in grants:
            if grant.session is not None and (
                self.sessions is None or not self.sessions.valid(grant.session)
            ):
                continue  # its browser session ended (a logout): the pass ends with it
            principal = await anyio.to_thread.run_sync(self.who, grant.user)  # the store may be far
            try:
                service = self.services.get(service_id)
            except NotFound:
                return None
            role = principal.role_in(service.project) if principal is not None else None
            if role is not None and role >= service.role:
                return service
        return None

    async def _socket(self, websocket: WebSocket, service_id: str, host: str) -> None:
        """A kernel's WebSocket: with a pass, from a page of the service's own origin; its holder
        checked again while it is open, on its messages (``RECHECK_SECONDS``)."""
        own = f"{self.origin.scheme}://{host.strip().lower()}"
        held = _passes_in(websocket.headers.get("cookie", ""))
        service = await self._reachable(held, service_id)
        if service is None or websocket.headers.get("origin", "").lower() != own:
            await websocket.close(code=POLICY_VIOLATION)
            return
        checked = [time.monotonic()]

        async def still_allowed() -> bool:
            if time.monotonic() - checked[0] < RECHECK_SECONDS:
                return True
            checked[0] = time.monotonic()
            return await self._reachable(held, service_id) is not None

        self.services.touch(service)
        await forward_socket(
            websocket, str(service.in_turn()[0]), lambda: self.services.touch(service), still_allowed
        )


def entry_url(origin: ServiceOrigin, request: Request, service_id: str, ticket: str) -> str:
    """Where the server sends a browser asking for a service's page: the service's origin, with
    ``ticket`` and the page asked for."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    site = origin.url(service_id, request.headers.get("host", ""))
    return f"{site}{ENTER}?ticket={ticket}&next={quote(target, safe='')}"


def _passes_in(cookie_header: str) -> list[str]:
    """Every ``SERVICE_COOKIE`` value a Cookie header carries."""
    name = f"{SERVICE_COOKIE}="
    return [p.strip()[len(name) :] for p in cookie_header.split(";") if p.strip().startswith(name)]


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return ""
