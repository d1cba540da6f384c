from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from phalanx.server.app import create_app
from phalanx.server.auth import COOKIE
from phalanx.server.settings import ServerSettings
from phalanx.store.base import Store
from tests.unit.server import fill

TOKEN = "s3cret-token-value"


@pytest.fixture
def secured(settings: ServerSettings, store: Store) -> Iterator[TestClient]:
    with TestClient(
        create_app(settings.model_copy(update={"token": TOKEN}), store), follow_redirects=False
    ) as c:
        yield c


def test_without_credentials_every_api_call_is_401(secured: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    for method, path in [
        ("GET", "/api/v1/experiments"),
        ("GET", f"/api/v1/experiments/{e.id}"),
        ("POST", f"/api/v1/experiments/{e.id}/stop"),
        ("DELETE", f"/api/v1/experiments/{e.id}"),
        ("POST", "/api/v1/ingest"),
        ("PUT", f"/api/v1/experiments/{e.id}/files/a.txt"),
        ("GET", "/api/v1/openapi.json"),
    ]:
        r = secured.request(method, path)
        assert r.status_code == 401, (method, path)
        assert r.json()["error"] == "unauthorized"
    assert store.get_experiment(e.id).id == e.id  # the DELETE did nothing


def test_a_wrong_token_is_401_and_the_right_one_works(secured: TestClient) -> None:
    wrong = secured.get("/api/v1/experiments", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert wrong.json()["message"] == (  # a refused token is told so, not that one is needed
        "this server refused the token: it is not this server's token (a wrong one, or the server's token"
        " was rotated since); ask the server's admin for its current token and log in again:"
        " `phalanx login http://testserver --token TOKEN`"
    )
    assert secured.get("/api/v1/experiments", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
    assert secured.get("/api/v1/experiments", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_pages_redirect_to_login_keeping_where_the_user_was_going(secured: TestClient) -> None:
    r = secured.get("/experiments/abc123?x=1")
    assert r.status_code == 303
    assert r.headers["location"] == "/login?next=%2Fexperiments%2Fabc123%3Fx%3D1"
    page = secured.get("/login", params={"next": "/experiments/abc123"})
    assert (
        page.status_code == 200 and 'name="token"' in page.text and 'value="/experiments/abc123"' in page.text
    )


def test_login_with_the_token_sets_a_session_cookie_that_opens_pages_and_api(secured: TestClient) -> None:
    bad = secured.post("/login", data={"token": "wrong", "next": "/"})
    assert bad.status_code == 401 and "not right" in bad.text
    assert COOKIE not in bad.cookies
    ok = secured.post("/login", data={"token": TOKEN, "next": "/compare"})
    assert ok.status_code == 303 and ok.headers["location"] == "/compare"
    cookie = ok.cookies[COOKIE]
    assert TOKEN not in cookie
    assert "httponly" in ok.headers["set-cookie"].lower()
    secured.cookies.set(COOKIE, cookie)
    assert secured.get("/").status_code == 200
    assert secured.get("/api/v1/experiments").status_code == 200


def test_login_never_redirects_to_another_site(secured: TestClient) -> None:
    for target in ("https://evil.example/", "//evil.example/", "/\\evil.example"):
        r = secured.post("/login", data={"token": TOKEN, "next": target})
        assert r.headers["location"] == "/"


def test_a_forged_cookie_is_refused(secured: TestClient) -> None:
    secured.cookies.set(COOKIE, "0" * 64)
    assert secured.get("/api/v1/experiments").status_code == 401


def test_login_page_assets_and_health_need_no_token(secured: TestClient) -> None:
    assert secured.get("/static/style.css").status_code == 200
    assert secured.get("/api/v1/health").json()["ok"] is True


def test_without_a_token_configured_everything_is_open(client: TestClient) -> None:
    assert client.get("/api/v1/experiments").status_code == 200
    assert client.get("/").status_code == 200


def test_the_live_log_stream_works_behind_the_token(secured: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    fill.log_lines(store, e.id, "worker-0", ["secret line"])
    with secured.stream("GET", f"/api/v1/experiments/{e.id}/logs/stream") as r:
        assert r.status_code == 401
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with secured.stream("GET", f"/api/v1/experiments/{e.id}/logs/stream", headers=headers) as r:
        body = r.read().decode()
    assert "secret line" in body and "event: end" in body
