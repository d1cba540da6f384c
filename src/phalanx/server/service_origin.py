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

Tickets and passes live in the server's memory, as its services do: after a restart a page's next
navigation gets a new pass on its own.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import anyio
from fastapi import Request
from starlette.responses import PlainTextResponse, RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from phalanx.errors import NotFound, UsageError
from phalanx.server.policy import Principal
from phalanx.server.proxy import POLICY_VIOLATION, forward, forward_socket
from phalanx.server.services import Service, Services

SERVICE_COOKIE = "phalanx_service"
ENTER = "/_phalanx/enter"
TICKET_SECONDS = 60.0
PASS_SECONDS = 8 * 3600.0
SERVICE_ID = re.compile(r"^[0-9a-f]{12}$")
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
# the service's answers: no sniffing, no Referer with its paths to other sites
HEADERS = [("x-content-type-options", "nosniff"), ("referrer-policy", "same-origin")]


@dataclass(frozen=True)
class ServiceOrigin:
    """Where services are served: ``scheme://{id}SUFFIX[:port]`` (no port: the one the server was
    reached on)."""

    scheme: str
    suffix: str  # ".svc.example.com": what follows the service's id in its host name
    port: int | None

    @classmethod
    def parse(cls, template: str) -> ServiceOrigin:
        """``template`` as ``--service-origin`` takes it; UsageError saying what is wrong."""
        hint = "give it as SCHEME://{id}.DOMAIN[:PORT], e.g. 'https://{id}.svc.example.com'"
        parts = urlsplit(template.strip())
        if parts.scheme not in ("http", "https") or parts.path not in ("", "/") or parts.query:
            raise UsageError(f"--service-origin {template!r}: an origin only (scheme, host, port); {hint}")
        netloc = parts.netloc.lower()
        host, _, port = netloc.partition(":") if not netloc.startswith("[") else (netloc, "", "")
        if not host.startswith("{id}.") or "@" in netloc:
            raise UsageError(f"--service-origin {template!r}: its host must begin with '{{id}}.'; {hint}")
        suffix = host.removeprefix("{id}")
        labels = suffix[1:].split(".")
        if not all(_LABEL.match(label) for label in labels):
            raise UsageError(f"--service-origin {template!r}: {suffix[1:]!r} is not a host name; {hint}")
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise UsageError(f"--service-origin {template!r}: {port!r} is not a port; {hint}")
        return cls(parts.scheme, suffix, int(port) if port else None)

    def service_of(self, host_header: str) -> str | None:
        """The service id a request's Host names, or None when it is not a service's host."""
        host = host_header.strip().lower().partition(":")[0]  # a service's host is a name, never [v6]
        if not host.endswith(self.suffix):
            return None
        service_id = host.removesuffix(self.suffix)
        return service_id if SERVICE_ID.match(service_id) else None

    def url(self, service_id: str, reached_on: str) -> str:
        """The service's origin, for a caller that reached the server at Host ``reached_on``."""
        port = self.port
        if port is None and ":" in reached_on.rsplit("]", 1)[-1]:
            port = int(reached_on.rsplit(":", 1)[1])
        default = {"http": 80, "https": 443}[self.scheme]
        shown = "" if port is None or port == default else f":{port}"
        return f"{self.scheme}://{service_id}{self.suffix}{shown}"


@dataclass(frozen=True)
class _Grant:
    service_id: str
    user: str | None  # None: the server token's holder (a server without accounts)
    expires: float


class Passes:
    """The tickets handed out and the passes they were redeemed for, in memory (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tickets: dict[str, _Grant] = {}
        self._passes: dict[str, _Grant] = {}

    def ticket(self, service_id: str, user: str | None) -> str:
        """A one-use ticket to ``service_id`` for ``user``."""
        ticket = secrets.token_urlsafe(32)
        with self._lock:
            self._drop_expired()
            self._tickets[ticket] = _Grant(service_id, user, self._clock() + TICKET_SECONDS)
        return ticket

    def redeem(self, ticket: str, service_id: str) -> str | None:
        """A pass for the ticket's holder (the ticket is spent), or None: unknown, spent, expired or
        for another service."""
        with self._lock:
            grant = self._tickets.pop(ticket, None)
            if grant is None or grant.service_id != service_id or grant.expires < self._clock():
                return None
            held = secrets.token_urlsafe(32)
            self._passes[held] = _Grant(service_id, grant.user, self._clock() + PASS_SECONDS)
            return held

    def holder(self, held: str, service_id: str) -> tuple[bool, str | None]:
        """(whether ``held`` is a live pass to ``service_id``, the user it was given to)."""
        with self._lock:
            grant = self._passes.get(held)
        if grant is None or grant.service_id != service_id or grant.expires < self._clock():
            return False, None
        return True, grant.user

    def _drop_expired(self) -> None:
        now = self._clock()
        for book in (self._tickets, self._passes):
            for key in [k for k, g in book.items() if g.expires < now]:
                del book[key]


class ServiceOriginMiddleware:
    """Serves the service hosts (the steps above); every other host goes on to ``app``.
    ``who``: the principal of a signed-in user (None: the server token's holder), or None when the
    account is gone or disabled; ``server_url``: where the server's own pages are."""

    def __init__(
        self,
        app: ASGIApp,
        origin: ServiceOrigin,
        passes: Passes,
        services: Services,
        who: Callable[[str | None], Principal | None],
        server_url: str,
    ) -> None:
        self.app = app
        self.origin = origin
        self.passes = passes
        self.services = services
        self.who = who
        self.server_url = server_url.rstrip("/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = _header(scope, b"host") if scope["type"] in ("http", "websocket") else ""
        service_id = self.origin.service_of(host) if host else None
        if service_id is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._socket(WebSocket(scope, receive, send), service_id, host)
        else:
            answer = await self._http(Request(scope, receive), service_id)
            for key, value in HEADERS:
                answer.headers.setdefault(key, value)
            await answer(scope, receive, send)

    async def _http(self, request: Request, service_id: str) -> Any:
        path = request.url.path
        base = f"/services/{service_id}/"
        if path == ENTER and request.method == "GET":
            return self._enter(request, service_id, base)
        service = await self._reachable(request.cookies.get(SERVICE_COOKIE, ""), service_id)
        if service is None:
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

    async def _reachable(self, held: str, service_id: str) -> Service | None:
        """The service, when ``held`` is a live pass to it whose holder still has its role."""
        live, user = self.passes.holder(held, service_id)
        if not live:
            return None
        principal = await anyio.to_thread.run_sync(self.who, user)  # the store may be a network away
        try:
            service = self.services.get(service_id)
        except NotFound:
            return None
        role = principal.role_in(service.project) if principal is not None else None
        return service if role is not None and role >= service.role else None

    async def _socket(self, websocket: WebSocket, service_id: str, host: str) -> None:
        """A kernel's WebSocket: with a pass, from a page of the service's own origin."""
        own = f"{self.origin.scheme}://{host.strip().lower()}"
        service = await self._reachable(websocket.cookies.get(SERVICE_COOKIE, ""), service_id)
        if service is None or websocket.headers.get("origin", "").lower() != own:
            await websocket.close(code=POLICY_VIOLATION)
            return
        self.services.touch(service)
        await forward_socket(websocket, str(service.in_turn()[0]), lambda: self.services.touch(service))


def entry_url(
    origin: ServiceOrigin, passes: Passes, request: Request, service_id: str, user: str | None
) -> str:
    """Where the server sends a browser asking for a service's page: the service's origin, with a
    ticket for ``user`` and the page asked for."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    ticket = passes.ticket(service_id, user)
    site = origin.url(service_id, request.headers.get("host", ""))
    return f"{site}{ENTER}?ticket={ticket}&next={quote(target, safe='')}"


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return ""
