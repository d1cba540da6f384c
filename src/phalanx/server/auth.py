"""Who may ask the server what: the checks every request passes before any route sees it.

One ASGI middleware, in this order (docs/security.md says why each exists):

1. Host allow-list: a request whose ``Host`` header is not one of the server's names is refused
   (400). A web page on another site that re-points its own DNS name at 127.0.0.1 (DNS rebinding)
   would otherwise reach a tokenless loopback server as if it were same-origin.
2. Token (when the server has one, or has users: docs/teams.md): ``Authorization: Bearer <token>``
   (the server's token, or a user's personal token), or a per-experiment replica token
   (``phalanx.tokens``: only that experiment's ingest and files), or the session cookie that
   ``/login`` sets. Else 401 (API) or a redirect to /login (pages). Who it is (a ``Principal``)
   goes into the request's state, for the routes' policies (``phalanx.server.policy``).
3. Cross-site requests: a state-changing request (POST, PUT, PATCH, DELETE) without an
   ``Authorization`` header must come from this server's own pages: its ``Origin`` (or, without
   one, ``Sec-Fetch-Site``) must not name another site. Scripts and the SDK send no ``Origin``.
4. Headers on every answer: CSP, X-Frame-Options, nosniff, Referrer-Policy.
5. An access log line per request (logger ``phalanx.server.access``), without tokens or cookies.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import logging
import re
import socket
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, urlsplit

import anyio.to_thread
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from phalanx.errors import NotFound, account_disabled
from phalanx.server.echoes import cut_echoes
from phalanx.server.outages import RETRY_AFTER_SECONDS, OutageLog, unavailable
from phalanx.server.policy import EVERYBODY, NOBODY, Principal
from phalanx.server.sessions import BearerThrottle, Sessions
from phalanx.store.accounts import Accounts
from phalanx.tokens import token_experiment

COOKIE = "phalanx_session"
# over https the session cookie's name says it is this host's alone: a browser refuses such a cookie
# set with a Domain (a page of a sibling host, such as a service's, cannot plant one) or without Secure
HOST_COOKIE = "__Host-phalanx_session"

access_log = logging.getLogger("phalanx.server.access")

# Reachable without a token: the login page itself, the static assets it needs (code and styles,
# no data) and a liveness probe that says nothing but "ok".
PUBLIC_PREFIXES = ("/login", "/logout", "/static/", "/api/v1/health")

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

BEARER, SESSION, REPLICA, NONE = "bearer", "session", "replica", "none"  # credential_of

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "localhost.localdomain", "ip6-localhost")

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]

# RFC 6750: a bearer token that was sent and refused (expired, revoked, wrong) is an "invalid_token"
INVALID_TOKEN = [(b"www-authenticate", b'Bearer error="invalid_token"')]

# What a replica's token may do: send its experiment's records and files, fetch its files (the
# Kubernetes code bundle), and check the server is up.
_SCOPED = re.compile(r"^/api/v1/experiments/(?P<id>[^/]+)/files/")
# ... and ask for the attempt number of a new start of one of its pods
# (docs/clusters.md#pods-restarted-by-kubernetes)
_SCOPED_ATTEMPT = re.compile(r"^/api/v1/experiments/(?P<id>[^/]+)/attempts/next$")


def is_public(path: str, method: str = "GET") -> bool:
    if path == "/api/v1/tokens" and method == "POST":  # a username and password buy a token
        return True
    return any(path == p.rstrip("/") or path.startswith(p) for p in PUBLIC_PREFIXES)


def host_name(host_header: str) -> str:
    """The name in a Host header, without the port, lower-case; IPv6 without its brackets."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def _json(status: int, code: str, message: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> Any:
    body = json.dumps({"error": code, "message": cut_echoes(message)}).encode()
    response = Response(body, status_code=status, media_type="application/json")
    for k, v in headers:
        response.raw_headers.append((k, v))
    return response


class SecurityMiddleware:
    """The checks above. ``token`` None: a tokenless (loopback) server; ``allowed_hosts`` holds
    lower-case names without ports, ``"*"`` for any."""

    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        allowed_hosts: Iterable[str],
        sessions: Sessions | None,
        throttle: BearerThrottle | None = None,
        accounts: Accounts | None = None,
        box_key: str | None = None,
        outages: OutageLog | None = None,
    ) -> None:
        self.app = app
        self.token = token
        # replica tokens are HMACs under the server's token (cluster jobs) or the home's box key
        # (boxed replicas on this machine: phalanx.tokens.box_key)
        self.replica_keys = tuple(k for k in (token, box_key) if k)
        self.accounts = accounts
        self.outages = outages
        self._team_admin: str | None = None
        self.allowed = {h.lower().strip("[]") for h in allowed_hosts}
        self.sessions = sessions
        # wrong bearer tokens per client address (the login form has its own budget: a script's
        # stale token must not lock people out of the form)
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status_holder = [0]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder[0] = message["status"]
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in SECURITY_HEADERS if k not in present]
                message = {**message, "headers": headers}
            await send(message)

        try:
            try:
                if self.accounts is not None and self.accounts.over_network:
                    # who this is comes from PostgreSQL: a round trip (seconds while it is busy
                    # storing a team's points) must not hold up the event loop and every request
                    refusal = await anyio.to_thread.run_sync(self.check, scope)
                else:  # SQLite answers from a local file sooner than a thread hop would
                    refusal = self.check(scope)
            except Exception as exc:  # the store failing to say who this is: never let it through
                refusal = self._failed(scope, exc)
            if refusal is not None:
                await refusal(scope, receive, send_with_headers)
            else:
                await self.app(scope, receive, send_with_headers)
        finally:
            self._log(scope, status_holder[0], time.monotonic() - started)

    def _failed(self, scope: Scope, exc: Exception) -> Any:
        """The answer when the store could not say who is asking: 503 while the database or the
        disk is gone (one log line per outage), else a 500 with the traceback in the log."""
        reason = unavailable(exc)
        if reason is not None:
            if self.outages is not None:
                self.outages.note(scope["method"], scope["path"], reason)
            return _json(
                503,
                "unavailable",
                f"{reason}; try again shortly",
                headers=[(b"retry-after", str(RETRY_AFTER_SECONDS).encode())],
            )
        logging.getLogger("phalanx.server.app").exception("%s %s failed", scope["method"], scope["path"])
        return _json(500, "error", f"internal error ({type(exc).__name__}); the server log has the details")

    def _log(self, scope: Scope, status: int, seconds: float) -> None:
        if not access_log.isEnabledFor(logging.INFO):
            return
        client = scope.get("client") or ("-", 0)
        access_log.info(
            '%s "%s %s" %s %.1fms', client[0], scope["method"], scope["path"], status or "-", seconds * 1000
        )

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket (a notebook's kernel channels) is let in as a POST would be: with a credential,
        and from this server's own pages unless it carries a bearer token (a browser opens one from
        any site with the user's cookie). Else it is closed before it is accepted (a 403)."""
        scope.setdefault("state", {})  # shared with the copy checked: the principal lands here
        try:
            refusal = await anyio.to_thread.run_sync(self.check, {**scope, "method": "POST"})
        except Exception as exc:  # the store failing to say who this is: never let it through
            refusal = exc
        client = scope.get("client") or ("-", 0)
        if refusal is not None:
            access_log.info('%s "WEBSOCKET %s" refused', client[0], scope["path"])
            await send({"type": "websocket.close", "code": 1008})
            return
        access_log.info('%s "WEBSOCKET %s"', client[0], scope["path"])
        await self.app(scope, receive, send)

    def check(self, scope: Scope) -> Any:
        """A response refusing the request, or None to let it through."""
        path: str = scope["path"]
        method: str = scope["method"]
        host = host_name(_header(scope, b"host"))
        # no Host at all (HTTP/1.0 clients) cannot be a rebinding browser, which always sends one;
        # nor can an IP address (rebinding needs the attacker's own DNS name in the Host header)
        if host and "*" not in self.allowed and host not in self.allowed and not _is_ip(host):
            return _json(
                400,
                "bad_host",
                f"this server does not answer to the host name {host!r}; start it with "
                f"--allowed-host {host or 'NAME'} (or PHALANX_ALLOWED_HOSTS) if that name is really its own",
            )
        authorization = _header(scope, b"authorization")
        team = self.team_admin() is not None
        self._set_principal(scope, NOBODY if team else EVERYBODY)
        if not is_public(path, method) and (self.token is not None or team):
            refusal = self._check_token(scope, path, method, authorization)
            if refusal is not None:
                return refusal
        # only a Bearer token is what a page cannot send across sites (a browser adds Basic or
        # Negotiate credentials of a proxy or an intranet by itself, with the session cookie)
        bearer = authorization.partition(" ")[0].lower() == "bearer"
        if method in UNSAFE_METHODS and not bearer and not self._same_origin(scope, host):
            return _json(
                403,
                "forbidden",
                "cross-site request refused: state-changing requests come from this server's own pages "
                "or carry 'Authorization: Bearer <token>'",
            )
        return None

    def _replica_of(self, given: str) -> str | None:
        """The experiment ``given`` is a replica token of, under any of the server's keys."""
        return next((e for k in self.replica_keys if (e := token_experiment(k, given)) is not None), None)

    def team_admin(self) -> str | None:
        """The first admin user: None while the server is in single-token mode. Once an admin
        exists the server stays in team mode (admins are disabled, never deleted), so a found
        name is kept; until then every request asks the store (on SQLite, again only after a
        commit: ``Accounts.first_admin``)."""
        if self._team_admin is None and self.accounts is not None:
            self._team_admin = self.accounts.first_admin()
        return self._team_admin

    @staticmethod
    def _set_principal(scope: Scope, principal: Principal, credential: str = "none") -> None:
        """Who asks, and with what they were let in (``credential_of``)."""
        state = scope.setdefault("state", {})
        state["principal"], state["credential"] = principal, credential

    def _user_principal(self, user: str | None) -> Principal | None:
        """The principal of a signed-in user (None: the server token, an admin's once teams
        exist); None when the account is gone or disabled."""
        return signed_in(self.accounts, user, self.team_admin() if user is None else None)

    def _check_token(self, scope: Scope, path: str, method: str, authorization: str) -> Any:
        scheme, _, given = authorization.partition(" ")
        given = given.strip()
        if scheme.lower() == "bearer" and given:
            client = (scope.get("client") or ("-", 0))[0]
            held = self.throttle.retry_after(given, client) if self.throttle is not None else None
            if held is not None:  # not even compared: a guess made now tells nothing, right or wrong
                why = (
                    f"too many wrong bearer tokens came from {client} in the last minute (this server's"
                    " token is short, so guesses at it are throttled per address), so this request's"
                    " token was not checked (it may be right)"
                    if held.per_address
                    else "this bearer token was refused too many times in the last minute, so it was not"
                    " checked again (other tokens are checked as usual)"
                )
                return _json(
                    429,
                    "too_many_attempts",
                    f"{why}; try again in {held.seconds} s",
                    [(b"retry-after", str(held.seconds).encode())],
                )
            if self.token is not None and hmac.compare_digest(given.encode(), self.token.encode()):
                admin = self._user_principal(None)  # the first admin's, once there is one
                if admin is None:
                    return _json(
                        401,
                        "unauthorized",
                        "the server token is the first admin's, whose account is disabled; use a user's token"
                        " (docs/teams.md)",
                        [(b"www-authenticate", b"Bearer")],
                    )
                self._set_principal(scope, admin, BEARER)
                return None
            experiment = self._replica_of(given)
            if experiment is not None:
                return self._check_scoped(scope, path, method, experiment)
            user = self.accounts.user_of_token(given) if self.accounts is not None else None
            principal = self._user_principal(user) if user is not None else None
            if principal is not None:
                self._set_principal(scope, principal, BEARER)
                return None
            if self.throttle is not None:
                self.throttle.failed(given, client)
        else:
            given = ""
        live, session_user = self._cookie_session(scope)
        principal = self._user_principal(session_user) if live else None
        if principal is not None:
            self._set_principal(scope, principal, SESSION)
            return None
        if path.startswith("/api/"):
            if given:
                return self._refused(scope, given)
            if live and session_user is not None:  # a session of an account disabled since
                refused = account_disabled(session_user)
                return _json(401, refused.code, refused.message, [(b"www-authenticate", b"Bearer")])
            return _json(
                401,
                "unauthorized",
                "this server needs a token: send 'Authorization: Bearer <token>'",
                [(b"www-authenticate", b"Bearer")],
            )
        query = scope.get("query_string", b"").decode("latin-1")
        target = path + (f"?{query}" if query else "")
        return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)

    def _refused(self, scope: Scope, given: str) -> Any:
        """The 401 for a bearer token that was sent and not accepted, saying why as far as this
        server knows (docs/server-submit.md, "When the server says no"): a disabled account, an expired
        token, else one not valid here (wrong; revoked, whose row is gone; or the server's token
        since rotated), with how to log in again at the URL the client used."""
        known = self.accounts.refused_token(given) if self.accounts is not None else None
        if known is not None and known.disabled:
            refused = account_disabled(known.user)
            return _json(401, refused.code, refused.message, INVALID_TOKEN)
        url = f"{scope.get('scheme', 'http')}://{_header(scope, b'host') or 'HOST'}"
        team = self.team_admin() is not None
        if known is not None and known.expired_at is not None:
            why = f"it expired at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(known.expired_at))}"
        elif team:
            why = "it is not valid here (a wrong token, or one revoked, rotated or expired)"
        else:
            why = "it is not this server's token (a wrong one, or the server's token was rotated since)"
        how = (
            f"log in again: `phalanx login {url} --user NAME` (your password buys a new token), or"
            f" `phalanx login {url} --token TOKEN` with a new one from an admin"
            if team
            else f"ask the server's admin for its current token and log in again: `phalanx login {url}"
            " --token TOKEN`"
        )
        return _json(401, "unauthorized", f"this server refused the token: {why}; {how}", INVALID_TOKEN)

    def _check_scoped(self, scope: Scope, path: str, method: str, experiment: str) -> Any:
        match = _SCOPED.match(path)
        attempt = _SCOPED_ATTEMPT.match(path)
        if (
            (path == "/api/v1/ingest" and method == "POST")
            or (match is not None and match["id"] == experiment and method in ("PUT", "GET", "HEAD"))
            or (attempt is not None and attempt["id"] == experiment and method == "POST")
        ):
            scope.setdefault("state", {})["experiment_scope"] = experiment
            self._set_principal(scope, Principal(user=None, replica_of=experiment), REPLICA)
            return None
        return _json(
            403,
            "forbidden",
            f"this is a replica token of experiment {experiment}: it can only send that experiment's "
            "records and files",
        )

    def _cookie_session(self, scope: Scope) -> tuple[bool, str | None]:
        """(whether the request carries a live session cookie, the user it signed in)."""
        value = session_cookie(scope)
        if value is None or self.sessions is None:
            return False, None
        return self.sessions.lookup(value)

    def _same_origin(self, scope: Scope, host: str) -> bool:
        """Whether a browser says this request comes from a page of this server (or is no browser).
        A page served over plain http never speaks for a server reached over https, even at the
        same host name (whoever can answer for http://HOST, on its port 80 or on the path, could
        otherwise act with the session); behind a TLS proxy the scheme is the proxy's
        (X-Forwarded-Proto, with --forwarded-allow-ips)."""
        origin = _header(scope, b"origin")
        if origin:
            if origin == "null":
                return False
            parts = urlsplit(origin)
            if _downgraded(parts.scheme, scope):
                return False
            return (parts.netloc.lower() == _header(scope, b"host").strip().lower()) and bool(host)
        site = _header(scope, b"sec-fetch-site").lower()
        if site:
            return site not in ("cross-site", "same-site")
        # no Origin and no Fetch Metadata (an older browser, or a privacy setting dropping Origin):
        # a Referer from another site still says where the request comes from
        referer = _header(scope, b"referer")
        if referer:
            parts = urlsplit(referer)
            if _downgraded(parts.scheme, scope):
                return False
            return parts.netloc.lower() == _header(scope, b"host").strip().lower()
        return True


def cookie_name(scheme: str) -> str:
    """The session cookie's name for a request over ``scheme`` (``HOST_COOKIE`` over https)."""
    return HOST_COOKIE if scheme == "https" else COOKIE


def session_cookie(scope: Scope) -> str | None:
    """The session cookie's value, or None: none, or two that differ (one set for a parent domain
    by a page of a sibling host, over plain http: whose session is it? neither is taken)."""
    name = cookie_name(str(scope.get("scheme", "http"))) + "="
    values = {
        part.strip()[len(name) :]
        for part in _header(scope, b"cookie").split(";")
        if part.strip().startswith(name)
    }
    return values.pop() if len(values) == 1 else None


def credential_of(scope: Scope) -> str:
    """What the request was let in with: ``BEARER`` (a user's or the server's token, which no page
    can send), ``SESSION`` (a browser's cookie), ``REPLICA`` or ``NONE`` (a tokenless server)."""
    return str(scope.get("state", {}).get("credential", NONE))


def signed_in(accounts: Accounts | None, user: str | None, team_admin: str | None) -> Principal | None:
    """The principal of ``user`` (None: the server token's holder, who is ``team_admin`` once teams
    exist, else allowed everything); None when the account is gone or disabled."""
    if user is None:
        user = team_admin
        if user is None:  # single-token mode: the server token can do everything
            return Principal(user=None, superuser=True)
    if accounts is None:
        return None
    try:
        record = accounts.user(user)
    except NotFound:
        return None
    if record.disabled:
        return None
    return Principal(user=user, superuser=record.is_admin, roles=accounts.roles_of(user))


def _downgraded(scheme: str, scope: Scope) -> bool:
    """Whether a page's ``scheme`` is plain http while the request came over https."""
    return scheme.lower() == "http" and scope.get("scheme") == "https"


def default_allowed_hosts(bind: str) -> list[str]:
    """Loopback names, plus the address the server listens on and, for a wildcard address, this
    machine's names and addresses (what replicas on other machines use to reach it)."""
    names = list(LOOPBACK_HOSTS)
    bind = bind.strip("[]").lower()
    if bind in ("0.0.0.0", "::", ""):
        hostname = socket.gethostname()
        names += [hostname, socket.getfqdn()]
        with contextlib.suppress(OSError):
            names += [str(info[4][0]) for info in socket.getaddrinfo(hostname, None)]
    elif bind not in names:
        names.append(bind)
    return sorted({n.lower() for n in names if n})
