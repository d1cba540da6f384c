"""Single sign-on pages: ``/login/sso`` starts an OpenID Connect sign-in, ``/login/sso/callback``
finishes it (phalanx.server.oidc checks what the provider sent). A signed-in user gets the same
session cookie as a password login; a user seen for the first time is created without a password;
the projects the role map names get the roles the user's groups give (and lose them when the
groups no longer do), so the provider stays the source of truth for those memberships."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from phalanx.errors import NotFound, UsageError
from phalanx.server.oidc import RelyingParty, SsoRefused
from phalanx.server.policy import policy
from phalanx.server.routes.pages import login_page, safe_next, start_session
from phalanx.store.accounts import Accounts, check_name

log = logging.getLogger(__name__)

STATE_COOKIE = "phalanx_sso_state"
CALLBACK = "/login/sso/callback"

router = APIRouter(include_in_schema=False)


def _relying_party(request: Request) -> RelyingParty | None:
    rp = getattr(request.app.state, "oidc", None)
    return rp if isinstance(rp, RelyingParty) else None


def _refused(request: Request, message: str, status: int) -> Response:
    log.warning("single sign-on refused: %s", message)
    response = login_page(request, "/", f"Single sign-on failed: {message}", status=status)
    response.delete_cookie(STATE_COOKIE, path=CALLBACK)
    return response


@router.get("/login/sso")
@policy("public")
def sso_start(request: Request, next: str = "/") -> Response:
    """Send the browser to the identity provider."""
    rp = _relying_party(request)
    if rp is None:
        return _refused(request, "this server has no single sign-on configured", 404)
    redirect_uri = rp.config.redirect_url or str(request.base_url).rstrip("/") + CALLBACK
    try:
        url, state = rp.start(redirect_uri, safe_next(next))
    except SsoRefused as exc:
        return _refused(request, str(exc), 502)
    response = RedirectResponse(url, status_code=303)
    # binds the answer to this browser: a callback URL planted in another browser (login CSRF) fails
    response.set_cookie(
        STATE_COOKIE,
        state,
        max_age=600,
        path=CALLBACK,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )
    return response


@router.get(CALLBACK)
@policy("public")
def sso_callback(
    request: Request, state: str = "", code: str = "", error: str = "", error_description: str = ""
) -> Response:
    """Check the provider's answer, then sign the user in."""
    rp = _relying_party(request)
    if rp is None:
        return _refused(request, "this server has no single sign-on configured", 404)
    if error:
        return _refused(request, f"the identity provider said {error}: {error_description[:200]}", 401)
    try:
        claims, target = rp.finish(state[:512], request.cookies.get(STATE_COOKIE, "")[:512], code[:4096])
        user = rp.user_name(claims)
        _sign_in(request, rp, user, claims)
    except SsoRefused as exc:
        return _refused(request, str(exc), 401)
    response = RedirectResponse(target, status_code=303)
    response.delete_cookie(STATE_COOKIE, path=CALLBACK)
    start_session(request, response, user)
    return response


def _sign_in(request: Request, rp: RelyingParty, user: str, claims: dict[str, object]) -> None:
    """Create the user on first sign-in, refuse a disabled one, apply the mapped roles."""
    accounts: Accounts = request.app.state.accounts
    try:
        check_name("user", user)
    except UsageError:
        raise SsoRefused(
            f"the name {user!r} from the identity provider is not a valid Phalanx user name; "
            "the server's admin can pick another claim with --oidc-user-claim"
        ) from None
    try:
        record = accounts.user(user)
    except NotFound:
        accounts.add_user(user, None)
        accounts.audit(user, "user.add", user, detail="single sign-on")
    else:
        if record.disabled:
            raise SsoRefused(f"the account {user!r} is disabled on this server")
        if record.password_hash is not None or record.is_admin:
            # a local account (the server admin "root", say) is never taken over by whoever the
            # provider lets pick that name
            raise SsoRefused(
                f"{user!r} is a local account of this server (it has a password, or is a server admin),"
                " so it cannot sign in through the identity provider; sign in with its password"
            )
    current = accounts.roles_of(user)
    known = set(accounts.projects())
    for project, role in rp.roles(claims).items():
        if project not in known:
            log.warning("--oidc-role-map names project %r, which does not exist", project)
            continue
        if role is not None and current.get(project) != role:
            accounts.set_member(project, user, role)
            accounts.audit(user, "member.set", f"{project}/{user}", project, f"{role.name} (single sign-on)")
        elif role is None and project in current:
            accounts.remove_member(project, user)
            accounts.audit(user, "member.remove", f"{project}/{user}", project, "single sign-on")
