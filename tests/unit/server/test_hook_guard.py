"""Where a server sends alert hooks (server/hook_guard.py): never to its own loopback, a metadata
service or its private network unless its admin allows it with `--hook-allow`; checked against the
address the connection is made to, and no redirect followed. The receivers are real HTTP servers on
loopback; what is refused never reaches them."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient

from phalanx.errors import UsageError
from phalanx.server.alerting import Deliverer, Retry
from phalanx.server.app import create_app
from phalanx.server.hook_guard import HookGuard, HookRefused, _Guarded
from phalanx.server.settings import ServerSettings
from phalanx.store.alerts import alert_book, outbox
from phalanx.store.sql import SqlStore
from tests.support.clock import ManualClock
from tests.support.webhooks import LOOPBACK, Receiver
from tests.unit.server.teams_fixtures import Team, make_team
from tests.unit.store.test_alert_outbox import _failed

SECRET = "s" * 32


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.9.9.9", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),  # a cloud's metadata service
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("10.1.2.3", "private"),
        ("172.16.0.9", "private"),
        ("192.168.1.20", "private"),
        ("fd00::7", "private"),
        ("100.64.0.1", "non-public"),  # shared (carrier-grade NAT)
        ("224.0.0.1", "multicast"),
        # IPv4 inside IPv6: compatible, translated, NAT64, 6to4, Teredo; local NAT64 and site-local
        ("::127.0.0.1", "loopback"),
        ("::ffff:0:7f00:1", "loopback"),
        ("64:ff9b::7f00:1", "loopback"),
        ("64:ff9b::a00:5", "private"),
        ("2002:7f00:1::", "loopback"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"),
        ("64:ff9b:1::5", "private"),
        ("fec0::1", "private"),
    ],
)
def test_an_address_that_is_not_public_is_refused_naming_what_it_is_and_the_way_to_allow_it(
    address: str, kind: str
) -> None:
    why = HookGuard().refusal("receiver.example", address)
    assert why is not None and why.startswith(
        f"receiver.example resolves to a{'n' if kind[0] in 'aeiou' else ''} {kind} address"
    )
    assert "`phalanx server --hook-allow receiver.example`" in why
    assert address not in why  # a name's address is not told to the delivery log's readers


@pytest.mark.parametrize("address", ["8.8.8.8", "151.101.1.69", "2606:4700:4700::1111", "64:ff9b::808:808"])
def test_a_public_address_is_let_through(address: str) -> None:
    assert HookGuard().refusal("hooks.slack.com", address) is None


def test_an_admin_allows_a_host_by_name_or_its_network() -> None:
    by_name = HookGuard.allowing(["Chat.Corp.Example"])
    assert by_name.refusal("chat.corp.example", "10.2.0.7") is None
    assert by_name.refusal("other.corp.example", "10.2.0.7") is not None
    by_network = HookGuard.allowing(["10.0.0.0/8", "::1"])
    assert by_network.refusal("anything", "10.200.1.1") is None
    assert by_network.refusal("anything", "::ffff:10.200.1.1") is None  # the same address in IPv6
    assert by_network.refusal("anything", "::1") is None
    assert by_network.refusal("anything", "192.168.1.1") is not None


@pytest.mark.parametrize("given", ["", "bad host", "a/b/c", "10.0.0.0/33"])
def test_a_malformed_allowance_is_refused_with_what_to_give(given: str) -> None:
    with pytest.raises(UsageError, match="give a host name, an address or a network"):
        HookGuard.allowing([given])


def _deliver_once(store: SqlStore, url: str, guard: HookGuard) -> tuple[int | None, str | None]:
    """A failed experiment's hook to ``url``, tried once: the receiver's status and the error."""
    hook = alert_book(store).add_hook("A", url, ["failed"], SECRET, None)
    _failed(store)
    deliverer = Deliverer(
        outbox(store), "https://phalanx.example", Retry(attempts=1), ManualClock(2e9), guard
    )
    assert deliverer.run_once() == 1
    (delivery,) = alert_book(store).deliveries(hook.id)
    (attempt,) = delivery.attempts
    return attempt.status_code, attempt.error


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_server_does_not_send_to_its_own_loopback_unless_allowed(store: SqlStore, host: str) -> None:
    """By address, and by a name that resolves to it (checked where the connection is made)."""
    with Receiver() as receiver:
        url = receiver.url.replace("127.0.0.1", host)
        status, error = _deliver_once(store, url, HookGuard())
        assert status is None and error is not None
        said = "127.0.0.1 is" if host == "127.0.0.1" else "localhost resolves to"
        assert error.startswith(f"not sent: {said} a loopback address: "), error
        assert receiver.received == []


def test_naming_no_proxy_or_a_proxy_for_the_other_scheme_turns_no_check_off(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NO_PROXY alone, or HTTPS_PROXY for an http:// hook, names no proxy this send goes through:
    the connection is the server's own, and guarded."""
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "example.org")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    url = "http://localhost:9/hook"
    assert any(isinstance(h, _Guarded) for h in HookGuard().opener(url).handlers)  # its own connection
    with Receiver() as receiver:
        status, error = _deliver_once(store, receiver.url.replace("127.0.0.1", "localhost"), HookGuard())
        assert status is None and error is not None and "a loopback address" in error, error
        assert receiver.received == []


def test_through_the_servers_proxy_a_public_receiver_is_sent_to(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY names a proxy for http:// hooks: the proxy (here a recording server on loopback)
    makes the connection, so the guard checks the receiver's address, not the proxy's."""
    with Receiver() as proxy:
        for name in ("HTTP_PROXY", "http_proxy"):
            monkeypatch.setenv(name, proxy.url.removesuffix("/hook"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        assert _deliver_once(store, "http://93.184.216.34/hook", HookGuard()) == (200, None)
        (got,) = proxy.wait_for(1)
    assert got.path == "http://93.184.216.34/hook"  # what a client asks of a proxy


def test_allowed_it_is_sent(store: SqlStore) -> None:
    with Receiver() as receiver:
        assert _deliver_once(store, receiver.url, LOOPBACK) == (200, None)
        assert len(receiver.wait_for(1)) == 1


@pytest.fixture
def elsewhere() -> Iterator[Receiver]:
    """Where a receiver redirects to: a hook's address the guard would let through."""
    with Receiver() as receiver:
        yield receiver


@pytest.fixture
def redirecting(elsewhere: Receiver) -> Iterator[str]:
    """A receiver that answers every POST with 302 Found to ``elsewhere``."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(302)
            self.send_header("Location", elsewhere.url)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_is_the_receivers_answer_and_is_not_followed(
    store: SqlStore, redirecting: str, elsewhere: Receiver
) -> None:
    status, error = _deliver_once(store, redirecting, LOOPBACK)
    assert status == 302 and error is not None and "redirects are not followed" in error
    assert elsewhere.received == []


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/hook", "http://[::1]:9/", "http://169.254.169.254/", "http://localhost/x"]
)
def test_adding_a_hook_to_an_address_that_is_not_public_is_refused_with_how_to_allow_it(
    settings: ServerSettings, store: SqlStore, url: str
) -> None:
    team: Team = make_team(store)
    editor = {"Authorization": f"Bearer {team.tokens['editor_a']}"}
    with TestClient(create_app(settings, store)) as client:
        r = client.post("/api/v1/projects/A/alerts", json={"url": url, "events": ["failed"]}, headers=editor)
        assert r.status_code == 400, r.text
        detail = json.dumps(r.json())
        assert " address: hooks are sent only to public addresses" in detail and "--hook-allow " in detail
        assert client.get("/api/v1/projects/A/alerts", headers=editor).json() == []


def test_a_refusal_is_an_os_error_so_a_try_fails_as_an_unreachable_receiver_does() -> None:
    assert issubclass(HookRefused, OSError)
