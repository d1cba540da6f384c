"""Personal tokens and accounts on a server: the token exchange `phalanx login` calls, revoking and
expiry taking effect at once, the login form, the upgrade from single-token mode, and no password
or token ever in clear in the database file or the server's log."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from fastapi.testclient import TestClient

from phalanx.config import Settings
from phalanx.errors import UsageError
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store import accounts as accounts_module
from phalanx.store.accounts import Accounts, Role, hash_password
from phalanx.store.base import Store

PASSWORD = "correct-horse-battery"
SERVER_TOKEN = "the-old-single-server-token-0123"


@pytest.fixture
def accounts(store: Store) -> Accounts:
    accounts = Accounts(store)
    accounts.add_user("root", "root-password-1", admin=True)
    accounts.add_user("ada", PASSWORD)
    accounts.add_project("vision")
    accounts.set_member("vision", "ada", Role.viewer)
    return accounts


@pytest.fixture
def client(settings: ServerSettings, store: Store, accounts: Accounts) -> Iterator[TestClient]:
    with TestClient(create_app(settings, store), follow_redirects=False) as c:
        yield c


def exchange(client: TestClient, name: str = "laptop", password: str = PASSWORD, **extra: object) -> dict:
    r = client.post("/api/v1/tokens", json={"username": "ada", "password": password, "name": name, **extra})
    assert r.status_code == 201, r.text
    return dict(r.json())


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_password_buys_a_named_token_shown_once(client: TestClient) -> None:
    out = exchange(client, expires_days=30)
    assert out["token"].startswith("phx_") and out["name"] == "laptop"
    assert out["expires_at"] == pytest.approx(time.time() + 30 * 86400, abs=120)
    me = client.get("/api/v1/me", headers=bearer(out["token"])).json()
    assert me == {"user": "ada", "admin": False, "projects": {"vision": "viewer"}}
    listed = client.get("/api/v1/tokens", headers=bearer(out["token"])).json()
    assert [t["name"] for t in listed] == ["laptop"] and "token" not in listed[0]
    wrong = client.post("/api/v1/tokens", json={"username": "ada", "password": "nope-nope", "name": "x"})
    assert wrong.status_code == 401
    unknown = client.post("/api/v1/tokens", json={"username": "bob", "password": PASSWORD, "name": "x"})
    assert unknown.status_code == 401 and unknown.json()["message"] == wrong.json()["message"]


# what a refused token is told on a team server (docs/teams.md, "When a token is refused")
LOG_IN_AGAIN = (
    "log in again: `phalanx login http://testserver --user NAME` (your password buys a new token), or"
    " `phalanx login http://testserver --token TOKEN` with a new one from an admin"
)


def refusal(r: httpx.Response, error: str = "unauthorized") -> str:
    """The message of a 401 that refused a token sent: RFC 6750's invalid_token."""
    assert r.status_code == 401 and r.headers["www-authenticate"] == 'Bearer error="invalid_token"', r.text
    assert r.json()["error"] == error
    return str(r.json()["message"])


def test_a_revoked_token_is_refused_at_once(client: TestClient) -> None:
    token = exchange(client)["token"]
    other = exchange(client, name="ci")["token"]
    assert client.get("/api/v1/experiments", headers=bearer(token)).status_code == 200
    assert client.delete("/api/v1/tokens/laptop", headers=bearer(other)).status_code == 204
    assert refusal(client.get("/api/v1/experiments", headers=bearer(token))) == (
        "this server refused the token: it is not valid here (a wrong token, or one revoked, rotated or"
        f" expired); {LOG_IN_AGAIN}"
    )
    # a wrong one is told the same (a revoked token's row is gone: the server cannot tell them apart)
    assert refusal(client.get("/api/v1/experiments", headers=bearer("phx_wrong"))) == refusal(
        client.get("/api/v1/experiments", headers=bearer(token))
    )
    missing = client.get("/api/v1/experiments")  # no token at all: asked for one
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["message"] == "this server needs a token: send 'Authorization: Bearer <token>'"
    assert client.get("/api/v1/experiments", headers=bearer(other)).status_code == 200
    assert client.delete("/api/v1/tokens/laptop", headers=bearer(other)).status_code == 404


def test_an_expired_token_is_refused_at_once(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    out = exchange(client, expires_days=1)
    assert client.get("/api/v1/experiments", headers=bearer(out["token"])).status_code == 200
    # the accounts' clock a second past the expiry, instead of waiting for it
    monkeypatch.setattr(accounts_module, "time", SimpleNamespace(time=lambda: out["expires_at"] + 1))
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(out["expires_at"]))
    assert refusal(client.get("/api/v1/experiments", headers=bearer(out["token"]))) == (
        f"this server refused the token: it expired at {when}; {LOG_IN_AGAIN}"
    )


def test_a_disabled_users_tokens_are_refused_at_once(client: TestClient, accounts: Accounts) -> None:
    token = exchange(client)["token"]
    client.post("/login", data={"username": "ada", "password": PASSWORD, "next": "/"})  # a session too
    accounts.set_disabled("ada", True)
    said = (
        "the account 'ada' is disabled on this server, so its password, tokens and sessions are refused:"
        " ask a server admin to enable it again (`phalanx admin user enable ada` on the server's machine)"
    )
    assert refusal(client.get("/api/v1/experiments", headers=bearer(token)), "account_disabled") == said
    by_session = client.get("/api/v1/experiments")
    assert by_session.status_code == 401 and by_session.json() == {
        "error": "account_disabled",
        "message": said,
    }
    r = client.post("/api/v1/tokens", json={"username": "ada", "password": PASSWORD, "name": "again"})
    assert r.status_code == 401 and r.json() == {"error": "account_disabled", "message": said}
    r = client.post("/api/v1/tokens", json={"username": "ada", "password": "wrong-one", "name": "again"})
    assert r.status_code == 401 and "disabled" not in r.text  # a wrong password learns nothing
    form = client.post("/login", data={"username": "ada", "password": PASSWORD, "next": "/"})
    assert form.status_code == 401 and "This account is disabled: ask a server admin" in form.text


def test_the_login_form_takes_an_account(client: TestClient) -> None:
    page = client.get("/login")
    assert 'name="username"' in page.text and 'name="token"' not in page.text
    bad = client.post("/login", data={"username": "ada", "password": "wrong-one", "next": "/"})
    assert bad.status_code == 401
    good = client.post("/login", data={"username": "ada", "password": PASSWORD, "next": "/"})
    assert good.status_code == 303
    assert client.get("/api/v1/me").json()["user"] == "ada"  # the session cookie
    client.post("/logout")
    assert client.get("/api/v1/me").status_code == 401


def test_secrets_are_never_in_clear_in_the_database_or_the_log(
    settings: ServerSettings, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = exchange(client)["token"]
    client.get("/api/v1/experiments", headers=bearer(token))
    client.post("/login", data={"username": "ada", "password": PASSWORD, "next": "/"})
    client.post("/api/v1/tokens", json={"username": "ada", "password": PASSWORD + "x", "name": "y"})
    client.delete("/api/v1/tokens/laptop", headers=bearer(token))
    files = [p for p in settings.store.home.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".db") for p in files)
    for secret in (PASSWORD, token, token.removeprefix("phx_")):
        for p in files:
            assert secret.encode() not in p.read_bytes(), f"{secret!r} in clear in {p}"
        assert secret not in caplog.text
    assert "ada" in caplog.text or "/api/v1/tokens" in caplog.text  # the log was captured at all


def test_single_token_mode_keeps_working_until_an_admin_exists(phalanx_home: Path, store: Store) -> None:
    settings = ServerSettings(
        store=Settings(home=phalanx_home), token=SERVER_TOKEN, allowed_hosts=["testserver"]
    )
    with TestClient(create_app(settings, store)) as c:
        assert c.get("/api/v1/experiments", headers=bearer(SERVER_TOKEN)).status_code == 200
        assert c.get("/api/v1/me", headers=bearer(SERVER_TOKEN)).json() == {
            "user": None,
            "admin": True,
            "projects": {},
        }
        assert c.get("/api/v1/experiments").status_code == 401
        accounts = Accounts(store)
        accounts.add_user("ada", PASSWORD)  # a user alone changes nothing...
        assert c.get("/api/v1/admin/audit", headers=bearer(SERVER_TOKEN)).status_code == 200
        accounts.add_user("root", "root-password-1", admin=True)  # ...an admin makes a team
        me = c.get("/api/v1/me", headers=bearer(SERVER_TOKEN)).json()
        assert me["user"] == "root" and me["admin"] is True  # the old token is the admin's now
        ada = c.post("/api/v1/tokens", json={"username": "ada", "password": PASSWORD, "name": "x"}).json()
        assert c.get("/api/v1/admin/audit", headers=bearer(ada["token"])).status_code == 403
        with pytest.raises(UsageError, match="root is the server's last enabled admin"):
            accounts.set_disabled("root", True)  # that would lock every admin out
        accounts.add_user("ops", "ops-password-1", admin=True)
        accounts.set_disabled("root", True)  # the token is root's: disabling root ends it too
        assert c.get("/api/v1/experiments", headers=bearer(SERVER_TOKEN)).status_code == 401


def test_a_tokenless_server_asks_for_sign_in_once_it_has_an_admin(
    settings: ServerSettings, store: Store
) -> None:
    with TestClient(create_app(settings, store), follow_redirects=False) as c:
        assert c.get("/api/v1/experiments").status_code == 200  # loopback, no token: open as before
        assert c.get("/login").status_code == 303
        Accounts(store).add_user("root", "root-password-1", admin=True)
        assert c.get("/api/v1/experiments").status_code == 401
        assert c.get("/").status_code == 303 and c.get("/login").status_code == 200
        r = c.post("/login", data={"username": "root", "password": "root-password-1", "next": "/"})
        assert r.status_code == 303
        assert c.get("/api/v1/me").json()["user"] == "root"


def test_members_are_managed_by_the_projects_admin(client: TestClient, accounts: Accounts) -> None:
    accounts.add_user("bob", None)
    accounts.set_member("vision", "bob", Role.admin)
    bob = bearer(accounts.issue_token("bob", "t", None)[0])
    ada = bearer(exchange(client)["token"])
    assert (
        client.put("/api/v1/projects/vision/members/ada", json={"role": "editor"}, headers=ada).status_code
        == 403
    )
    r = client.put("/api/v1/projects/vision/members/ada", json={"role": "editor"}, headers=bob)
    assert r.status_code == 200 and r.json()["ada"] == "editor"
    assert (
        client.put("/api/v1/projects/vision/members/ada", json={"role": "boss"}, headers=bob).status_code
        == 400
    )
    trail = [(e.actor, e.action, e.target) for e in accounts.audit_trail()]
    assert ("bob", "member.set", "vision/ada") in trail


def test_users_and_projects_are_the_server_admins_to_manage(client: TestClient, accounts: Accounts) -> None:
    root = bearer(accounts.issue_token("root", "t", None)[0])
    ada = bearer(exchange(client)["token"])
    calls = [
        ("GET", "/api/v1/admin/users", None),
        ("POST", "/api/v1/admin/users", {"name": "bob", "password": "bob-password", "admin": True}),
        ("PATCH", "/api/v1/admin/users/ada", {"disabled": True}),
        ("GET", "/api/v1/admin/projects", None),
        ("POST", "/api/v1/admin/projects", {"name": "nlp"}),
    ]
    for method, path, body in calls:  # a project member, even its admin, is no server admin
        assert client.request(method, path, json=body, headers=ada).status_code == 403, (method, path)
    assert [u["name"] for u in client.get("/api/v1/admin/users", headers=root).json()] == ["ada", "root"]
    added = client.post("/api/v1/admin/users", json={"name": "bob", "password": "bob-password"}, headers=root)
    assert added.status_code == 201 and added.json()["team_mode_started"] is False
    assert "password" not in added.text and "hash" not in added.text
    taken = client.post("/api/v1/admin/users", json={"name": "bob"}, headers=root)
    assert taken.status_code == 409 and "already exists" in taken.json()["message"]
    short = client.post("/api/v1/admin/users", json={"name": "eve", "password": "short"}, headers=root)
    assert short.status_code == 400 and "8 characters" in short.json()["message"]
    bad = client.post("/api/v1/admin/projects", json={"name": "no/slash"}, headers=root)
    assert bad.status_code == 400
    assert client.post("/api/v1/admin/projects", json={"name": "nlp"}, headers=root).status_code == 201
    assert client.get("/api/v1/admin/projects", headers=root).json() == {
        "nlp": {},
        "vision": {"ada": "viewer"},
    }
    missing = client.patch("/api/v1/admin/users/nobody", json={"disabled": True}, headers=root)
    assert missing.status_code == 404
    off = client.patch("/api/v1/admin/users/ada", json={"disabled": True}, headers=root)
    assert off.status_code == 200 and off.json()["disabled"] is True
    assert client.get("/api/v1/me", headers=ada).status_code == 401  # refused from the next request on
    assert [u.name for u in accounts.users() if u.disabled] == ["ada"]
    for body in ({"name": "eve", "password": "        "}, {"name": "eve", "password": ""}):
        blank = client.post("/api/v1/admin/users", json=body, headers=root)
        assert blank.status_code == 400 and "not all of them spaces" in blank.json()["message"]
    twin = client.post("/api/v1/admin/users", json={"name": "ROOT", "password": "x-password-1"}, headers=root)
    assert twin.status_code == 409 and "differing only in case" in twin.json()["message"]
    loose = [({"disabled": "yes"}, "ada"), ({"disabled": True, "admin": True}, "ada")]
    for body, name in loose:  # a string is no boolean, an unknown field is no silent no-op
        assert client.patch(f"/api/v1/admin/users/{name}", json=body, headers=root).status_code == 422
    last = client.patch("/api/v1/admin/users/root", json={"disabled": True}, headers=root)
    assert last.status_code == 400 and "last enabled admin" in last.json()["message"]
    assert client.get("/api/v1/me", headers=root).json()["user"] == "root"  # still in
    assert "eve" not in [u.name for u in accounts.users()]


@pytest.mark.usefixtures("real_password_hashing")
def test_passwords_are_hashed_with_argon2id_at_its_recommended_cost(store: Store) -> None:
    """The other unit tests hash at argon2's cheapest cost (tests/unit/conftest.py); the product
    hashes at pwdlib's recommended one, which makes guessing a stolen database's passwords slow."""
    assert hash_password(PASSWORD).startswith("$argon2id$v=19$m=65536,t=3,p=4$")
    accounts = Accounts(store)
    accounts.add_user("bob", PASSWORD)
    assert accounts.user("bob").password_hash.startswith("$argon2id$v=19$m=65536,t=3,p=4$")  # type: ignore[union-attr]
    assert accounts.authenticate("bob", PASSWORD) == "bob"
    assert accounts.authenticate("bob", "not-" + PASSWORD) is None
