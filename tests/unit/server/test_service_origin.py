"""Services at origins of their own (`phalanx server --service-origin`, docs/services.md), in process
over boards without a process (tests/unit/server/fake_services.py): a browser signed in on the server
is sent to the service's own host with a one-use ticket, which buys a pass for that host alone; the
pass follows its holder's account and role; the server's origin no longer serves a service to a
browser (a script's bearer token still is); a kernel's WebSocket needs the pass and the service's own
Origin."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from phalanx.errors import UsageError
from phalanx.server.app import create_app
from phalanx.server.service_passes import PASS_SECONDS, TICKET_SECONDS, Passes, ServiceOrigin
from phalanx.server.settings import ServerSettings
from phalanx.store.accounts import Accounts, Role
from phalanx.store.base import Store
from tests.unit.server import fill
from tests.unit.server.fake_services import SEEN

pytestmark = pytest.mark.usefixtures("started_without_a_process")

SERVER = "http://phalanx.test"
PASSWORD = "viewer-password-1"


@dataclass
class Site:
    client: TestClient
    accounts: Accounts
    boards: list[str]  # two boards of project A: their ids


@pytest.fixture
def site(settings: ServerSettings, store: Store) -> Iterator[Site]:
    accounts = Accounts(store)
    accounts.add_user("root", "root-password-1", admin=True)
    accounts.add_project("A")
    accounts.add_user("vic", PASSWORD)
    accounts.set_member("A", "vic", Role.viewer)
    first, second = fill.experiment(store, project="A"), fill.experiment(store, project="A")
    served = settings.model_copy(
        update={
            "allowed_hosts": ["phalanx.test"],
            "public_url": SERVER,
            "service_origin": "http://{id}.svc.phalanx.test",
        }
    )
    with TestClient(create_app(served, store), base_url=SERVER, follow_redirects=False) as client:
        signed = client.post("/login", data={"username": "vic", "password": PASSWORD, "next": "/"})
        assert signed.status_code == 303, signed.text
        boards = [
            client.post("/api/v1/services", json={"experiment": e.id}).json()["id"] for e in (first, second)
        ]
        yield Site(client, accounts, boards)


def enter(client: TestClient, board: str, page: str = "data/runs?a=1") -> str:
    """Ask the server for a page of ``board`` as a browser does: the ticket URL it redirects to."""
    sent = client.get(f"/services/{board}/{page}")
    assert sent.status_code == 303, sent.text
    return str(sent.headers["location"])


def test_a_browser_reaches_a_board_at_its_own_origin_through_a_one_use_ticket(site: Site) -> None:
    board = site.boards[0]
    ticket_url = enter(site.client, board)
    parts = urlsplit(ticket_url)
    assert (parts.scheme, parts.netloc, parts.path) == (
        "http",
        f"{board}.svc.phalanx.test",
        "/_phalanx/enter",
    )
    assert parse_qs(parts.query)["next"] == [f"/services/{board}/data/runs?a=1"]
    entered = site.client.get(ticket_url)
    assert (entered.status_code, entered.headers["location"]) == (303, f"/services/{board}/data/runs?a=1")
    cookie = SimpleCookie(entered.headers["set-cookie"])["phalanx_service"]
    assert cookie["httponly"] and cookie["samesite"].lower() == "lax" and cookie["path"] == "/"
    assert not cookie["domain"]  # host-only: no other service's host, nor the server's, gets it
    page = site.client.get(f"http://{board}.svc.phalanx.test/services/{board}/data/runs?a=1")
    assert (page.status_code, page.text, page.headers["x-board"]) == (200, "ok", "fake")
    assert page.headers["x-content-type-options"] == "nosniff"
    assert SEEN["path"] == f"/services/{board}/data/runs?a=1"
    assert not {k.lower() for k in SEEN["headers"]} & {"cookie", "authorization"}  # type: ignore[attr-defined]
    again = site.client.get(ticket_url)  # a ticket buys one pass
    assert again.status_code == 403 and "used already or has expired" in again.text
    root = site.client.get(f"http://{board}.svc.phalanx.test/")
    assert (root.status_code, root.headers["location"]) == (307, f"/services/{board}/")


def test_the_servers_session_never_reaches_a_service_host_and_the_server_refuses_one_from_there(
    site: Site,
) -> None:
    """What a notebook's page could try with the viewer's browser: its host holds no session, and a
    request it makes to the server comes from another origin."""
    board = site.boards[0]
    no_pass = site.client.get(f"http://{board}.svc.phalanx.test/services/{board}/x")
    assert no_pass.status_code == 303 and no_pass.headers["location"] == f"{SERVER}/services/{board}/x"
    bare = site.client.get(f"http://{board}.svc.phalanx.test/")  # the host's name typed alone
    assert bare.status_code == 303 and bare.headers["location"] == f"{SERVER}/services/{board}/"
    forged = site.client.post(
        "/api/v1/services",
        json={"experiment": "x"},
        headers={"Origin": f"http://{board}.svc.phalanx.test"},
    )
    assert forged.status_code == 403 and "cross-site" in forged.json()["message"]


def test_a_pass_opens_its_own_service_only(site: Site) -> None:
    mine, other = site.boards
    site.client.get(enter(site.client, mine))
    held = site.client.cookies.get("phalanx_service", domain=f"{mine}.svc.phalanx.test")
    assert held
    elsewhere = site.client.get(
        f"http://{other}.svc.phalanx.test/services/{other}/x", headers={"Cookie": f"phalanx_service={held}"}
    )
    assert elsewhere.status_code == 303 and elsewhere.headers["location"].startswith(SERVER)  # no pass there
    posted = site.client.post(
        f"http://{other}.svc.phalanx.test/services/{other}/x", headers={"Cookie": f"phalanx_service={held}"}
    )
    assert posted.status_code == 401 and "no pass" in posted.text
    ticket = parse_qs(urlsplit(enter(site.client, mine)).query)["ticket"][0]
    swapped = site.client.get(f"http://{other}.svc.phalanx.test/_phalanx/enter?ticket={ticket}")
    assert swapped.status_code == 403  # a ticket to one service is not one to another
    outside = site.client.get(f"http://{mine}.svc.phalanx.test/api/v1/experiments")
    assert outside.status_code == 404  # a service's host serves that service, nothing of the server's


def test_a_pass_follows_its_holders_account_and_role(site: Site) -> None:
    board = site.boards[0]
    site.client.get(enter(site.client, board))
    url = f"http://{board}.svc.phalanx.test/services/{board}/x"
    assert site.client.get(url).status_code == 200
    site.accounts.remove_member("A", "vic")
    assert site.client.get(url).status_code == 303  # back to the server, which now says no
    site.accounts.set_member("A", "vic", Role.viewer)
    assert site.client.get(url).status_code == 200
    site.accounts.set_disabled("vic", True)
    assert site.client.get(url).status_code == 303


def test_the_server_keeps_a_service_for_scripts_and_refuses_a_browsers_write(
    site: Site, store: Store
) -> None:
    board = site.boards[0]
    written = site.client.post(f"/services/{board}/api/contents")
    assert written.status_code == 403 and "its own origin" in written.json()["message"]
    token = site.accounts.issue_token("vic", "script", None)[0]
    scripted = site.client.get(f"/services/{board}/data/runs", headers={"Authorization": f"Bearer {token}"})
    assert (scripted.status_code, scripted.text) == (200, "ok")


def test_a_kernels_socket_needs_the_pass_and_the_services_own_origin(site: Site) -> None:
    board = site.boards[0]
    url = f"ws://{board}.svc.phalanx.test/services/{board}/api/kernels/k/channels"
    own = {"Origin": f"http://{board}.svc.phalanx.test"}
    with pytest.raises(WebSocketDisconnect) as no_pass, site.client.websocket_connect(url, headers=own):
        pass
    site.client.get(enter(site.client, site.boards[0]))
    other = {"Origin": f"http://{site.boards[1]}.svc.phalanx.test"}
    with (
        pytest.raises(WebSocketDisconnect) as other_origin,
        site.client.websocket_connect(url, headers=other),
    ):
        pass
    with pytest.raises(WebSocketDisconnect) as through, site.client.websocket_connect(url, headers=own):
        pass
    assert no_pass.value.code == other_origin.value.code == 1008  # refused before the handshake
    assert through.value.code == 1011  # let through to the fake board, which speaks no WebSocket
    server = f"ws://phalanx.test/services/{board}/api/kernels/k/channels"  # the server's origin: a
    with (
        pytest.raises(WebSocketDisconnect) as at_server,
        site.client.websocket_connect(  # browser's
            server, headers={"Origin": SERVER}
        ),
    ):
        pass
    assert at_server.value.code == 1008


@pytest.mark.parametrize(
    ("template", "origin"),
    [
        ("https://{id}.svc.example.com", ServiceOrigin("https", ".svc.example.com", None)),
        ("http://{id}.localhost:8001/", ServiceOrigin("http", ".localhost", 8001)),
        ("HTTPS://{ID}.Svc.Example.com", ServiceOrigin("https", ".svc.example.com", None)),  # any case
        ("https://svc-{id}.example.com", None),
    ],
)
def test_the_origin_template_is_read_or_refused_saying_how(
    template: str, origin: ServiceOrigin | None
) -> None:
    if origin is not None:
        assert ServiceOrigin.parse(template) == origin
        return
    with pytest.raises(UsageError, match=r"must begin with '\{id\}\.'"):
        ServiceOrigin.parse(template)


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("ftp://{id}.svc.example.com", "an origin only"),
        ("https://{id}.svc.example.com/path", "an origin only"),
        ("https://svc.example.com", "must begin with"),
        ("https://user@{id}.svc.example.com", "must begin with"),
        ("https://{id}.bad_name.com", "is not a host name"),
        ("https://{id}.svc.example.com:99999", "is not a port"),
        ("https://{id}.svc.example.com:", "is not a port"),
        ("https://{id}.svc.example.com:\u0663", "is not a port"),  # an Arabic-Indic 3
        ("https://{id}.svc.example.com#part", "an origin only"),
        ("https://{id}.svc.example.com?", "an origin only"),
        ("http://{id}.127.0.0.1", "is not a host name"),
        ("", "an origin only"),
    ],
)
def test_a_malformed_origin_template_is_refused(template: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        ServiceOrigin.parse(template)


def test_the_service_host_and_its_port() -> None:
    origin = ServiceOrigin.parse("http://{id}.svc.localhost")
    assert origin.service_of("0123456789ab.svc.localhost:8000") == "0123456789ab"
    assert origin.service_of("0123456789AB.SVC.localhost") == "0123456789ab"
    assert origin.service_of("evil.svc.localhost") is None  # not a service id
    assert origin.service_of("0123456789ab.svc.localhost.evil.com") is None
    assert origin.url("0123456789ab", "127.0.0.1:8123") == "http://0123456789ab.svc.localhost:8123"
    assert origin.url("0123456789ab", "gpu-box") == "http://0123456789ab.svc.localhost"
    fixed = ServiceOrigin.parse("https://{id}.svc.example.com:443")
    assert fixed.url("0123456789ab", "gpu-box:8000") == "https://0123456789ab.svc.example.com"


def test_tickets_and_passes_expire() -> None:
    now = [1000.0]
    passes = Passes(clock=lambda: now[0])
    late = passes.ticket("0123456789ab", "vic", None)
    now[0] += TICKET_SECONDS + 1
    assert passes.redeem(late, "0123456789ab") is None
    held = passes.redeem(passes.ticket("0123456789ab", "vic", "s1"), "0123456789ab")
    grant = passes.grant(held or "", "0123456789ab")
    assert grant is not None and (grant.user, grant.session) == ("vic", "s1")
    assert passes.grant(held or "", "ba9876543210") is None
    now[0] += PASS_SECONDS + 1
    assert passes.grant(held or "", "0123456789ab") is None


def test_a_pass_ends_with_the_session_that_asked_for_it(site: Site) -> None:
    board = site.boards[0]
    site.client.get(enter(site.client, board))
    url = f"http://{board}.svc.phalanx.test/services/{board}/x"
    assert site.client.get(url).status_code == 200
    out = site.client.post("/logout", headers={"Origin": SERVER})
    assert out.status_code == 303
    assert site.client.get(url).status_code == 303  # signed out: the pass is worth nothing


def test_two_pass_cookies_one_planted_by_a_sibling_still_let_the_right_one_in(site: Site) -> None:
    board = site.boards[0]
    site.client.get(enter(site.client, board))
    held = site.client.cookies.get("phalanx_service", domain=f"{board}.svc.phalanx.test")
    url = f"http://{board}.svc.phalanx.test/services/{board}/x"
    site.client.cookies.clear()
    both = site.client.get(url, headers={"Cookie": f"phalanx_service={held}; phalanx_service=planted"})
    planted_only = site.client.get(url, headers={"Cookie": "phalanx_service=planted"})
    assert (both.status_code, planted_only.status_code) == (200, 303)


def test_a_junk_bearer_token_beside_the_session_is_no_script(site: Site) -> None:
    """Only a bearer token that was accepted makes a request a script's: a wrong one beside the
    browser's session is the browser's, sent to the service's origin as ever."""
    board = site.boards[0]
    junk = site.client.get(f"/services/{board}/x", headers={"Authorization": "Bearer junk"})
    assert junk.status_code == 303 and ".svc.phalanx.test" in junk.headers["location"]


def test_the_service_host_takes_no_body_over_the_services_limit(
    settings: ServerSettings, store: Store
) -> None:
    accounts = Accounts(store)
    accounts.add_user("root", "root-password-1", admin=True)
    e = fill.experiment(store, project="A")
    token = accounts.issue_token("root", "t", None)[0]
    served = settings.model_copy(
        update={
            "allowed_hosts": ["phalanx.test"],
            "public_url": SERVER,
            "service_origin": "http://{id}.svc.phalanx.test",
            "max_service_bytes": 1000,
        }
    )
    with TestClient(create_app(served, store), base_url=SERVER, follow_redirects=False) as client:
        bearer = {"Authorization": f"Bearer {token}"}
        board = client.post("/api/v1/services", json={"experiment": e.id}, headers=bearer).json()["id"]
        url = f"http://{board}.svc.phalanx.test/services/{board}/api/contents/x"
        big = client.put(url, content=b"x" * 1001)
        at_server = client.put(f"/services/{board}/api/contents/x", content=b"x" * 1001, headers=bearer)
        fits = client.put(f"/services/{board}/api/contents/x", content=b"x" * 1000, headers=bearer)
    assert (big.status_code, at_server.status_code, fits.status_code) == (413, 413, 200)


def test_over_https_the_session_cookie_is_the_hosts_alone(settings: ServerSettings, store: Store) -> None:
    """``__Host-`` cookies: a browser takes none set with a Domain (a sibling host's page cannot plant
    one) nor without Secure; an unprefixed one is not read over https, and two sessions at once are
    none."""
    accounts = Accounts(store)
    accounts.add_user("root", "root-password-1", admin=True)
    accounts.add_user("vic", PASSWORD)
    secure = "https://phalanx.test"
    app = create_app(settings.model_copy(update={"allowed_hosts": ["phalanx.test"]}), store)
    with TestClient(app, base_url=secure, follow_redirects=False) as client:
        signed = client.post("/login", data={"username": "vic", "password": PASSWORD, "next": "/"})
        cookie = SimpleCookie(signed.headers["set-cookie"])["__Host-phalanx_session"]
        assert cookie["secure"] and cookie["httponly"] and cookie["path"] == "/" and not cookie["domain"]
        value = cookie.value
        client.cookies.clear()
        mine = client.get("/api/v1/me", headers={"Cookie": f"__Host-phalanx_session={value}"})
        plain = client.get("/api/v1/me", headers={"Cookie": f"phalanx_session={value}"})
        two = client.get(
            "/api/v1/me", headers={"Cookie": f"__Host-phalanx_session={value}; __Host-phalanx_session=other"}
        )
    assert mine.status_code == 200 and mine.json()["user"] == "vic"
    assert plain.status_code == two.status_code == 401
