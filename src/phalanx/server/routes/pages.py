"""The web UI's pages and the login form. The UI is a set of plain ES modules served from /static;
every page path returns the same shell (index.html), whose script draws the page the path names."""

from __future__ import annotations

import hmac
import html
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from phalanx.errors import AccountDisabled
from phalanx.server.auth import cookie_name, session_cookie
from phalanx.server.deps import SettingsDep
from phalanx.server.policy import policy

UI_DIR = Path(__file__).resolve().parent.parent / "ui"

router = APIRouter(include_in_schema=False)


def _shell() -> HTMLResponse:
    return HTMLResponse((UI_DIR / "index.html").read_text(), headers={"Cache-Control": "no-cache"})


@router.get("/")
@policy("signed-in")
def index() -> HTMLResponse:
    return _shell()


@router.get("/experiments/{experiment_id}")
@policy("signed-in")  # the shell holds no data: the API it calls checks the role
def experiment_page(experiment_id: str) -> HTMLResponse:
    return _shell()


@router.get("/compare")
@policy("signed-in")
def compare_page() -> HTMLResponse:
    return _shell()


@router.get("/sweep")
@policy("signed-in")
def sweep_page() -> HTMLResponse:
    return _shell()


@router.get("/queue")
@policy("signed-in")
def queue_page() -> HTMLResponse:
    return _shell()


@router.get("/services")
@policy("signed-in")
def services_page() -> HTMLResponse:
    return _shell()


@router.get("/alerts")
@policy("signed-in")  # the shell holds no data: the API it calls checks each hook's project role
def alerts_page() -> HTMLResponse:
    return _shell()


TOKEN_FIELDS = """<p class="muted">This server needs its access token.</p>
    <label for="token">Token</label>
    <input id="token" name="token" type="password" autocomplete="current-password" autofocus required>
    <p class="muted small">The token is the server's PHALANX_TOKEN or the content of its --token-file.</p>"""

ACCOUNT_FIELDS = """<p class="muted">Sign in with your account.</p>
    <label for="username">User</label>
    <input id="username" name="username" autocomplete="username" autofocus required>
    <label for="password">Password</label>
    <input id="password" name="password" type="password" autocomplete="current-password" required>"""


def _team_mode(request: Request) -> bool:
    """Whether the server has users (an admin exists): its login form asks for an account."""
    accounts = getattr(request.app.state, "accounts", None)
    return accounts is not None and accounts.first_admin() is not None


SSO_BUTTON = """<a class="button sso" href="/login/sso?next={next}">Sign in with SSO</a>
    <p class="muted small or">or</p>"""


def login_page(request: Request, next_url: str, error: str = "", status: int = 200) -> HTMLResponse:
    """The login form of this server: an account's or the server token's, with the single sign-on
    button when the server has an identity provider (docs/teams.md#single-sign-on)."""
    sso = getattr(request.app.state, "oidc", None) is not None
    return _login_page(next_url, error, status, team=_team_mode(request), sso=sso)


def _login_page(
    next_url: str, error: str = "", status: int = 200, team: bool = False, sso: bool = False
) -> HTMLResponse:
    text = (UI_DIR / "login.html").read_text()
    button = SSO_BUTTON.format(next=html.escape(quote(next_url, safe="/"), quote=True)) if sso else ""
    text = text.replace("{{fields}}", button + (ACCOUNT_FIELDS if team else TOKEN_FIELDS))
    text = text.replace("{{next}}", html.escape(next_url, quote=True))
    text = text.replace("{{error}}", f'<p class="error">{html.escape(error)}</p>' if error else "")
    return HTMLResponse(text, status_code=status)


def safe_next(next_url: str | None) -> str:
    """Only a path on this server: never an absolute URL or '//host' (no open redirect)."""
    if not next_url or not next_url.startswith("/") or next_url.startswith("//") or "\\" in next_url:
        return "/"
    return next_url


@router.get("/login")
@policy("public")
def login_form(request: Request, settings: SettingsDep, next: str = "/") -> Response:
    team = _team_mode(request)
    if not settings.token and not team and getattr(request.app.state, "oidc", None) is None:
        return RedirectResponse(safe_next(next), status_code=303)
    return login_page(request, safe_next(next))


@router.post("/login")
@policy("public")
def login(
    request: Request,
    settings: SettingsDep,
    token: Annotated[str, Form(max_length=4096)] = "",
    next: Annotated[str, Form(max_length=4096)] = "/",
    username: Annotated[str, Form(max_length=64)] = "",
    password: Annotated[str, Form(max_length=1024)] = "",
) -> Response:
    target = safe_next(next)
    team = _team_mode(request)
    if not settings.token and not team:
        return RedirectResponse(target, status_code=303)
    throttle = request.app.state.login_throttle
    client = request.client.host if request.client else "-"
    wait = throttle.retry_after(client)
    if wait:
        page = _login_page(
            target,
            f"Too many wrong tokens were typed into this form from your address ({client}) in the last"
            f" minute, so the token you typed was not checked; try again in {wait} s.",
            status=429,
            team=team,
            sso=getattr(request.app.state, "oidc", None) is not None,
        )
        page.headers["Retry-After"] = str(wait)
        return page
    user: str | None = None
    if team and username:
        try:
            user = request.app.state.accounts.authenticate(username.strip(), password)
        except AccountDisabled:  # the right password: its owner may know why they cannot sign in
            said = "This account is disabled: ask a server admin to enable it again."
            return login_page(request, target, said, status=401)
        if user is None:
            throttle.failed(client)
            return login_page(request, target, "Wrong user or password.", status=401)
    elif not settings.token or not hmac.compare_digest(token.strip().encode(), settings.token.encode()):
        throttle.failed(client)
        return login_page(request, target, "That token is not right.", status=401)
    response = RedirectResponse(target, status_code=303)
    start_session(request, response, user)
    return response


def start_session(request: Request, response: Response, user: str | None) -> None:
    """A new session for ``user`` (a token login: None), its cookie set on ``response``: HttpOnly,
    SameSite=Lax, Secure over https, kept as long as the session lives. Every way of signing in
    (token, password, single sign-on) ends here, so the cookie's protections are written once."""
    sessions = request.app.state.sessions
    response.set_cookie(
        cookie_name(request.url.scheme),
        sessions.create(user),
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
        max_age=int(sessions.lifetime),
    )


def _end_session(request: Request) -> Response:
    """End this browser's session on the server (the cookie is worthless afterwards, even copied)."""
    sessions = request.app.state.sessions
    value = session_cookie(request.scope)
    if sessions is not None and value:
        sessions.end(value)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(cookie_name(request.url.scheme), secure=request.url.scheme == "https")
    return response


@router.post("/logout")
@policy("public")
def logout(request: Request) -> Response:
    """Only a POST logs out, so the cross-site check every POST passes applies: a link or an image
    on another site (a GET, which browsers send with the cookie) cannot log the user out."""
    return _end_session(request)


@router.get("/logout")
@policy("public")
def logout_page(request: Request, settings: SettingsDep) -> Response:
    """A bookmarked or typed /logout changes nothing: it shows the button that POSTs the logout."""
    if not settings.token and not _team_mode(request):
        return RedirectResponse("/", status_code=303)
    return HTMLResponse((UI_DIR / "logout.html").read_text(), headers={"Cache-Control": "no-cache"})
