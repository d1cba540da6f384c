"""Where services are served with ``--service-origin`` (``ServiceOrigin``) and the tickets and passes
that let a browser in there (``Passes``): phalanx.server.service_origin says how they are used."""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from phalanx.errors import UsageError

TICKET_SECONDS = 60.0
PASS_SECONDS = 8 * 3600.0
MOST_KEPT = 10_000  # tickets, and passes, kept at once: the oldest go first beyond it
SERVICE_ID = re.compile(r"^[0-9a-f]{12}$")
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_HINT = "give it as SCHEME://{id}.DOMAIN[:PORT], e.g. 'https://{id}.svc.example.com'"


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
        said = f"--service-origin {template!r}"
        parts = urlsplit(template.strip())
        if parts.scheme not in ("http", "https") or parts.path not in ("", "/"):
            raise UsageError(f"{said}: an origin only (scheme, host, port); {_HINT}")
        if parts.query or parts.fragment or "?" in template or "#" in template:
            raise UsageError(f"{said}: an origin only (scheme, host, port); {_HINT}")
        netloc = parts.netloc.lower()
        host, colon, port = netloc.partition(":") if not netloc.startswith("[") else (netloc, "", "")
        if not host.startswith("{id}.") or "@" in netloc:
            raise UsageError(f"{said}: its host must begin with '{{id}}.'; {_HINT}")
        suffix = host.removeprefix("{id}")
        labels = suffix[1:].split(".")
        if not all(_LABEL.match(label) for label in labels) or labels[-1].isdigit():
            raise UsageError(f"{said}: {suffix[1:]!r} is not a host name; {_HINT}")
        if colon and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise UsageError(f"{said}: {port!r} is not a port; {_HINT}")
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
        given = reached_on.rsplit("]", 1)[-1].rpartition(":")[2] if ":" in reached_on else ""
        if port is None and given.isascii() and given.isdigit():
            port = int(given)
        default = {"http": 80, "https": 443}[self.scheme]
        shown = "" if port is None or port == default else f":{port}"
        return f"{self.scheme}://{service_id}{self.suffix}{shown}"


@dataclass(frozen=True)
class Grant:
    """What a ticket or a pass lets in: one service, for one user (None: the server token's holder,
    on a server without accounts), while the browser session that asked for it lives (None: a server
    without sessions), until ``expires``."""

    service_id: str
    user: str | None
    session: str | None
    expires: float


class Passes:
    """The tickets handed out and the passes they were redeemed for, in memory (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tickets: dict[str, Grant] = {}
        self._passes: dict[str, Grant] = {}

    def ticket(self, service_id: str, user: str | None, session: str | None) -> str:
        """A one-use ticket to ``service_id`` for ``user`` signed in with ``session``."""
        ticket = secrets.token_urlsafe(32)
        with self._lock:
            self._keep(
                self._tickets, ticket, Grant(service_id, user, session, self._clock() + TICKET_SECONDS)
            )
        return ticket

    def redeem(self, ticket: str, service_id: str) -> str | None:
        """A pass for the ticket's holder (the ticket is spent), or None: unknown, spent, expired or
        for another service."""
        with self._lock:
            grant = self._tickets.pop(ticket, None)
            if grant is None or grant.service_id != service_id or grant.expires < self._clock():
                return None
            held = secrets.token_urlsafe(32)
            expires = self._clock() + PASS_SECONDS
            self._keep(self._passes, held, Grant(service_id, grant.user, grant.session, expires))
            return held

    def grant(self, held: str, service_id: str) -> Grant | None:
        """What the pass ``held`` lets in, when it is a live pass to ``service_id``."""
        with self._lock:
            found = self._passes.get(held)
        if found is None or found.service_id != service_id or found.expires < self._clock():
            return None
        return found

    def _keep(self, book: dict[str, Grant], key: str, grant: Grant) -> None:
        now = self._clock()
        for old in [k for k, g in book.items() if g.expires < now]:
            del book[old]
        while len(book) >= MOST_KEPT:  # the oldest first (a dict keeps its order of insertion)
            del book[next(iter(book))]
        book[key] = grant
