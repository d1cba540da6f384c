"""Single sign-on against a real identity provider on loopback (tests/support/oidc_provider.py): a
real `phalanx server` configured with it, driven by an HTTP client that follows the redirects as a
browser does. The first sign-in creates the user with the role the group map gives and reaches
/api/v1/me; a tampered state, an ID token for another issuer or another client, and a disabled
account are refused without a session. One provider and one server serve the module; each test signs
in as a user of its own, so no test sees what another's sign-ins created."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from joserfc.jwk import RSAKey
from tests.integration.server.serverproc import Server, start_server, stop_server
from tests.integration.server.test_teams_audit import admin
from tests.support.oidc_provider import IdpUser, Provider, running_provider

SECRET = "idp-client-secret-never-logged-4711"


@pytest.fixture(scope="module")
def running_sso(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Provider, Server, RSAKey]]:
    """One provider and one server configured with it, for the module: each test signs in as a
    user of its own (``sso``), so what one test's sign-ins create no other test sees."""
    home = tmp_path_factory.mktemp("sso-server-home")
    admin(home, "user", "add", "root", "--admin", "--password-stdin", stdin="root-password\n")
    admin(home, "project", "add", "vision")
    admin(home, "project", "add", "nlp")
    nobody = IdpUser(sub="u-0", preferred_username="nobody", email="nobody@example.org")
    with running_provider(nobody, client_id="phalanx", client_secret=SECRET) as provider:
        server = start_server(
            home,
            env={
                "PHALANX_OIDC_ISSUER": provider.issuer,
                "PHALANX_OIDC_CLIENT_ID": "phalanx",
                "PHALANX_OIDC_CLIENT_SECRET": SECRET,
                "PHALANX_OIDC_GROUPS_CLAIM": "groups",
                "PHALANX_OIDC_ROLE_MAP": "ml-vision=vision:editor,ml-nlp=nlp:viewer",
            },
        )
        provider.client.redirect_uris.append(f"{server.url}/login/sso/callback")
        try:
            yield provider, server, provider.key
        finally:
            stop_server(server.proc)


@pytest.fixture
def sso(running_sso: tuple[Provider, Server, RSAKey]) -> tuple[Provider, Server]:
    """The provider as it starts (its published key, honest ID tokens, no sign-in yet) with a user
    of this test's own in group ml-vision, and the server."""
    provider, server, key = running_sso
    name = f"user-{next(_USER_NUMBERS):03d}"  # not a prefix of another: `user ls` is searched as text
    provider.user = IdpUser(
        sub=f"u-{name}", preferred_username=name, email=f"{name}@example.org", groups=["ml-vision"]
    )
    provider.key = key
    provider.id_token_issuer = provider.id_token_audience = None
    provider.signing_key = None
    provider.logins = 0
    return provider, server


_USER_NUMBERS = itertools.count(1)


def _browser() -> httpx.Client:
    return httpx.Client(follow_redirects=True, timeout=60)


def test_first_sso_login_creates_the_user_with_the_mapped_role(sso: tuple[Provider, Server]) -> None:
    provider, server = sso
    with _browser() as browser:
        login = browser.get(f"{server.url}/login")
        assert "Sign in with SSO" in login.text
        landed = browser.get(f"{server.url}/login/sso", params={"next": "/?project=vision"})
        assert landed.status_code == 200, landed.text
        assert str(landed.url) == f"{server.url}/?project=vision"  # the page it started from
        assert provider.logins == 1
        cookie = next(c for c in browser.cookies.jar if c.name == "phalanx_session")
        assert cookie.has_nonstandard_attr("HttpOnly")
        me = browser.get(f"{server.url}/api/v1/me")
        assert me.status_code == 200, me.text
        assert me.json() == {
            "user": provider.user.preferred_username,
            "admin": False,
            "projects": {"vision": "editor"},
        }
        # the session is a normal one: a state-changing request from another site is refused
        cross = browser.post(f"{server.url}/logout", headers={"Origin": "http://evil.example"})
        assert cross.status_code == 403
    # the provider's groups changed: the next sign-in follows them (vision dropped, nlp given); it
    # also rotated its signing key since the server fetched its keys: they are fetched again
    provider.user.groups = ["ml-nlp"]
    provider.key = RSAKey.generate_key(2048, parameters={"kid": "rotated", "use": "sig", "alg": "RS256"})
    with _browser() as browser:
        browser.get(f"{server.url}/login/sso")
        assert browser.get(f"{server.url}/api/v1/me").json()["projects"] == {"nlp": "viewer"}
    log = "".join(p.read_text() for p in server.home.glob("server-*.log"))
    assert SECRET not in log


def _callback_url(browser: httpx.Client, server: Server) -> str:
    """Walk to the provider and back, stopping before the callback: its URL with code and state."""
    to_idp = browser.get(f"{server.url}/login/sso", follow_redirects=False)
    assert to_idp.status_code == 303, to_idp.text
    back = browser.get(to_idp.headers["location"], follow_redirects=False)
    assert back.status_code == 302, back.text
    location = back.headers["location"]
    assert location.startswith(f"{server.url}/login/sso/callback?"), location
    return location


def _refused(response: httpx.Response, browser: httpx.Client, server: Server, why: str) -> None:
    assert response.status_code == 401, response.text
    assert why in response.text, response.text
    assert not any(c.name == "phalanx_session" for c in browser.cookies.jar)
    assert browser.get(f"{server.url}/api/v1/me").status_code == 401


def test_a_tampered_state_is_refused(sso: tuple[Provider, Server]) -> None:
    _, server = sso
    with _browser() as browser:
        location = _callback_url(browser, server)
        query = parse_qs(urlsplit(location).query)
        tampered = {"code": query["code"][0], "state": query["state"][0] + "x"}
        response = browser.get(f"{server.url}/login/sso/callback?{urlencode(tampered)}")
        _refused(response, browser, server, "state does not match")
        # and the untampered answer, planted in a browser that did not start the sign-in
    with _browser() as other:
        _refused(other.get(location), other, server, "did not start in this browser")


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("id_token_issuer", "http://127.0.0.1:1/other-issuer", "not valid here"),
        ("id_token_audience", "another-client", "issued to another client"),
        ("signing_key", RSAKey.generate_key(2048, parameters={"kid": "test-key"}), "signature"),
    ],
)
def test_an_id_token_for_another_issuer_or_client_is_refused(
    sso: tuple[Provider, Server], field: str, value: object, why: str
) -> None:
    provider, server = sso
    setattr(provider, field, value)
    with _browser() as browser:
        response = browser.get(_callback_url(browser, server))
        _refused(response, browser, server, why)
    admin_users = admin(server.home, "user", "ls")
    assert (
        provider.user.preferred_username not in admin_users
    )  # nobody was created from a token that failed its checks


def test_a_local_account_of_the_same_name_is_not_taken_over(sso: tuple[Provider, Server]) -> None:
    provider, server = sso
    provider.user.preferred_username = "root"  # the provider lets somebody call themselves root
    with _browser() as browser:
        response = browser.get(_callback_url(browser, server))
        _refused(response, browser, server, "local account")


def test_a_disabled_user_is_refused(sso: tuple[Provider, Server]) -> None:
    provider, server = sso
    with _browser() as browser:
        assert browser.get(f"{server.url}/login/sso").status_code == 200
    admin(server.home, "user", "disable", provider.user.preferred_username)
    with _browser() as browser:
        response = browser.get(_callback_url(browser, server))
        _refused(response, browser, server, "disabled")
