"""Token authentication for the API and the pages.

When the server has a token, every API call must carry ``Authorization: Bearer <token>`` or the
session cookie that ``/login`` sets; pages without either are redirected to ``/login``. The cookie
holds an HMAC of the token (never the token itself), so reading a cookie does not reveal the token,
and changing the token logs everybody out. Comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from urllib.parse import quote

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp

COOKIE = "phalanx_session"

# Reachable without a token: the login page itself, the static assets it needs (code and styles,
# no data) and a liveness probe that says nothing but "ok".
PUBLIC_PREFIXES = ("/login", "/logout", "/static/", "/api/v1/health")


def session_value(token: str) -> str:
    """What the session cookie holds for ``token``."""
    return hmac.new(token.encode(), b"phalanx-session-v1", hashlib.sha256).hexdigest()


def check_credentials(request: Request, token: str) -> bool:
    """True when the request carries the token (bearer header) or a valid session cookie."""
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() == "bearer" and given and hmac.compare_digest(given.strip().encode(), token.encode()):
        return True
    cookie = request.cookies.get(COOKIE, "")
    return bool(cookie) and hmac.compare_digest(cookie.encode(), session_value(token).encode())


def is_public(path: str) -> bool:
    return any(path == p.rstrip("/") or path.startswith(p) for p in PUBLIC_PREFIXES)


class TokenAuthMiddleware(BaseHTTPMiddleware):
    """Answers 401 (API) or a redirect to /login (pages) when credentials are missing or wrong."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        path = request.url.path
        if is_public(path) or check_credentials(request, self.token):
            return await call_next(request)
        if path.startswith("/api/"):
            return JSONResponse(
                {
                    "error": "unauthorized",
                    "message": "this server needs a token: send 'Authorization: Bearer <token>'",
                },
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
