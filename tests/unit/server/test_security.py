"""The attacks of issue #16, each failing: a pid named through ingest is never signalled, ingest
cannot rewrite a supervised experiment's status nor write an experiment that does not exist, a
replica token writes its own experiment only, foreign Host headers and cross-site POSTs are
refused, a cookie is worthless after logout, login is throttled, pages carry CSP/frame headers."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from phalanx.domain import ExperimentStatus
from phalanx.server.app import create_app
from phalanx.server.auth import COOKIE
from phalanx.server.settings import ServerSettings
from phalanx.store.accounts import Accounts
from phalanx.store.base import Store
from phalanx.tokens import experiment_token
from tests.unit.server import fill
from tests.unit.server.teams_fixtures import make_group

TOKEN = "the-server-token-0123456789"


@pytest.fixture
def secured(settings: ServerSettings, store: Store) -> Iterator[TestClient]:
    with TestClient(
        create_app(settings.model_copy(update={"token": TOKEN}), store), follow_redirects=False
    ) as c:
        yield c


def _record(exp: str, kind: str, data: dict[str, Any], seq: int = 0, stream: str = "s-1") -> dict[str, Any]:
    return {
        "stream": stream,
        "seq": seq,
        "kind": kind,
        "experiment_id": exp,
        "time": time.time(),
        "data": data,
    }


def _script_experiment(client: TestClient, exp: str, pid: int, **extra: Any) -> None:
    data = {"name": "evil", "project": "p", "pid": pid, "host": __import__("socket").gethostname(), **extra}
    r = client.post("/api/v1/ingest", json={"events": [_record(exp, "experiment", data, stream=f"s-{exp}")]})
    assert r.status_code == 200, r.text


def test_ingest_cannot_change_the_status_of_a_supervised_experiment(client: TestClient, store: Store) -> None:
    e = fill.experiment(store, status=ExperimentStatus.SUCCEEDED)
    r = client.post("/api/v1/ingest", json={"events": [_record(e.id, "status", {"status": "running"})]})
    assert r.status_code == 409 and r.json()["error"] == "conflict"
    assert store.get_experiment(e.id).status is ExperimentStatus.SUCCEEDED
    assert client.delete(f"/api/v1/experiments/{e.id}").status_code == 204


def test_a_plain_script_reports_its_status_but_an_ended_one_cannot_run_again(
    client: TestClient, store: Store
) -> None:
    _script_experiment(client, "script1", 0)
    ok = client.post(
        "/api/v1/ingest", json={"events": [_record("script1", "status", {"status": "succeeded"}, 1)]}
    )
    assert ok.status_code == 200
    assert store.get_experiment("script1").status is ExperimentStatus.SUCCEEDED
    again = client.post(
        "/api/v1/ingest", json={"events": [_record("script1", "status", {"status": "running"}, 2)]}
    )
    assert again.status_code == 409
    assert store.get_experiment("script1").status is ExperimentStatus.SUCCEEDED


def test_ingest_refuses_records_of_an_experiment_that_does_not_exist(
    client: TestClient, store: Store
) -> None:
    e = fill.experiment(store)
    scalar = {"title": "loss", "series": "s", "value": 1.0, "iteration": 0}
    batch = [_record(e.id, "scalar", scalar, 0), _record("nosuchexp", "scalar", scalar, 1)]
    r = client.post("/api/v1/ingest", json={"events": batch})
    assert r.status_code == 404 and "nosuchexp" in r.json()["message"]
    assert store.metric_titles(e.id) == {}  # the batch is refused whole
    # a prefix of an existing id is not that experiment
    r = client.post("/api/v1/ingest", json={"events": [_record(e.id[:4], "scalar", scalar, 2)]})
    assert r.status_code == 404


def test_a_replica_token_writes_its_own_experiment_only(secured: TestClient, store: Store) -> None:
    mine, other = fill.experiment(store, status=ExperimentStatus.RUNNING), fill.experiment(store)
    auth = {"Authorization": f"Bearer {experiment_token(TOKEN, mine.id)}"}
    scalar = {"title": "loss", "series": "s", "value": 1.0, "iteration": 0}
    own = secured.post("/api/v1/ingest", json={"events": [_record(mine.id, "scalar", scalar)]}, headers=auth)
    assert own.status_code == 200 and own.json() == {"accepted": 1}
    foreign = secured.post(
        "/api/v1/ingest", json={"events": [_record(other.id, "scalar", scalar, 1)]}, headers=auth
    )
    assert foreign.status_code == 403
    assert store.metric_titles(other.id) == {}
    created = secured.post(
        "/api/v1/ingest", json={"events": [_record("brandnew", "experiment", {"name": "x"}, 2)]}, headers=auth
    )
    assert created.status_code == 403
    assert (
        secured.put(f"/api/v1/experiments/{mine.id}/files/a.txt", content=b"x", headers=auth).status_code
        == 200
    )
    assert (
        secured.put(f"/api/v1/experiments/{other.id}/files/a.txt", content=b"x", headers=auth).status_code
        == 403
    )
    ended = make_group(store, "examples")
    store.update_group(ended.id, status="succeeded")
    for method, path in [
        ("GET", "/api/v1/experiments"),
        ("GET", f"/api/v1/experiments/{mine.id}"),
        ("POST", f"/api/v1/experiments/{mine.id}/stop"),
        ("DELETE", f"/api/v1/experiments/{other.id}"),
        ("DELETE", f"/api/v1/groups/{ended.id}"),
        ("GET", "/api/v1/admin/users"),
        ("POST", "/api/v1/admin/projects"),
    ]:
        assert secured.request(method, path, headers=auth).status_code == 403, (method, path)
    assert store.get_experiment(other.id).id == other.id and store.get_group(ended.id).id == ended.id
    # a token made up for another experiment (not signed by the server's token) is no token at all
    forged = {"Authorization": f"Bearer {experiment_token('guess', other.id)}"}
    assert secured.post("/api/v1/ingest", json={"events": []}, headers=forged).status_code == 401


def test_a_foreign_host_header_is_refused(settings: ServerSettings, store: Store) -> None:
    default = settings.model_copy(update={"allowed_hosts": None})  # loopback names only
    with TestClient(create_app(default, store), base_url="http://127.0.0.1:8000") as c:
        assert c.get("/api/v1/experiments").status_code == 200
        assert c.get("/api/v1/experiments", headers={"Host": "localhost:8000"}).status_code == 200
        rebound = c.get("/api/v1/experiments", headers={"Host": "attacker.example:8000"})
        assert rebound.status_code == 400 and rebound.json()["error"] == "bad_host"
        assert (
            c.post("/api/v1/ingest", json={"events": []}, headers={"Host": "attacker.example"}).status_code
            == 400
        )
        # an address is no DNS name: nothing to rebind (replicas reach a 0.0.0.0 server by its IP)
        assert c.get("/api/v1/experiments", headers={"Host": "10.1.2.3:8000"}).status_code == 200
        assert c.get("/api/v1/experiments", headers={"Host": "[fd00::1]:8000"}).status_code == 200
    custom = settings.model_copy(update={"allowed_hosts": ["phalanx.lab"]})
    with TestClient(create_app(custom, store), base_url="http://phalanx.lab") as c:
        assert c.get("/api/v1/experiments").status_code == 200


def test_a_cross_site_post_is_refused(client: TestClient, store: Store) -> None:
    e = fill.experiment(store, status=ExperimentStatus.RUNNING)
    for headers in (
        {"Origin": "http://attacker.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        # credentials a browser adds by itself (a proxy's Basic, an intranet's Negotiate) are no token
        {"Origin": "http://attacker.example", "Authorization": "Basic dXNlcjpwYXNz"},
        {"Sec-Fetch-Site": "cross-site", "Authorization": "Negotiate YIIB"},
    ):
        r = client.post(f"/api/v1/experiments/{e.id}/stop", headers=headers)
        assert r.status_code == 403, headers
        assert client.delete(f"/api/v1/experiments/{e.id}", headers=headers).status_code == 403
    assert store.get_experiment(e.id).status is ExperimentStatus.RUNNING
    assert not (Path(client.app.state.settings.store.runs_dir) / e.id / "stop").exists()  # type: ignore[attr-defined]
    same = client.post(f"/api/v1/experiments/{e.id}/stop", headers={"Origin": "http://testserver"})
    assert same.status_code == 200


def test_a_plain_http_page_of_the_same_host_does_not_speak_for_the_server_over_https(
    settings: ServerSettings, store: Store
) -> None:
    e = fill.experiment(store, status=ExperimentStatus.RUNNING)
    with TestClient(create_app(settings, store), base_url="https://testserver") as c:
        for headers in ({"Origin": "http://testserver"}, {"Referer": "http://testserver/experiments"}):
            assert c.post(f"/api/v1/experiments/{e.id}/stop", headers=headers).status_code == 403, headers
        assert store.get_experiment(e.id).status is ExperimentStatus.RUNNING
        same = c.post(f"/api/v1/experiments/{e.id}/stop", headers={"Origin": "https://testserver"})
        assert same.status_code == 200


def test_a_post_whose_only_clue_is_a_foreign_referer_is_refused(client: TestClient, store: Store) -> None:
    """An older browser sends neither Origin nor Sec-Fetch-Site on a form POST, but a Referer."""
    e = fill.experiment(store, status=ExperimentStatus.RUNNING)
    r = client.post(f"/api/v1/experiments/{e.id}/stop", headers={"Referer": "https://attacker.example/page"})
    assert r.status_code == 403
    assert store.get_experiment(e.id).status is ExperimentStatus.RUNNING
    ours = client.post(
        f"/api/v1/experiments/{e.id}/stop", headers={"Referer": "http://testserver/experiments"}
    )
    assert ours.status_code == 200


def test_a_session_cookie_is_worthless_after_logout(secured: TestClient) -> None:
    ok = secured.post("/login", data={"token": TOKEN, "next": "/"})
    assert ok.status_code == 303
    cookie = ok.cookies[COOKIE]
    assert cookie != TOKEN and TOKEN not in cookie
    copied = {"Cookie": f"{COOKIE}={cookie}"}
    assert secured.get("/api/v1/experiments", headers=copied).status_code == 200
    secured.post("/logout", headers={**copied, "Origin": "http://testserver"})
    secured.cookies.clear()
    assert secured.get("/api/v1/experiments", headers=copied).status_code == 401


def test_sessions_survive_a_server_restart(settings: ServerSettings, store: Store) -> None:
    s = settings.model_copy(update={"token": TOKEN})
    with TestClient(create_app(s, store), follow_redirects=False) as c:
        cookie = c.post("/login", data={"token": TOKEN}).cookies[COOKIE]
    with TestClient(create_app(s, store), follow_redirects=False) as c:
        assert c.get("/api/v1/experiments", headers={"Cookie": f"{COOKIE}={cookie}"}).status_code == 200


def test_login_is_throttled(secured: TestClient) -> None:
    for _ in range(5):
        assert secured.post("/login", data={"token": "guess"}).status_code == 401
    blocked = secured.post("/login", data={"token": TOKEN})  # even the right one, for a while
    assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) > 0
    assert COOKIE not in blocked.cookies


def test_pages_and_answers_carry_csp_frame_and_nosniff_headers(
    secured: TestClient, client: TestClient
) -> None:
    for c, path in ((client, "/"), (client, "/api/v1/experiments"), (secured, "/login")):
        r = c.get(path)
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["x-content-type-options"] == "nosniff"


def test_openapi_names_the_bearer_scheme_and_error_answers(client: TestClient) -> None:
    doc = client.get("/api/v1/openapi.json").json()
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearer"]["description"],
    }
    assert doc["security"] == [{"bearer": []}]
    stop = doc["paths"]["/api/v1/experiments/{experiment_id}/stop"]["post"]["responses"]
    for status in ("401", "403", "404"):
        assert stop[status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorOut"
        }


def test_every_request_is_in_the_access_log(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="phalanx.server.access"):
        client.get("/api/v1/experiments/nope", headers={"Authorization": "Bearer hidden"})
    lines = [r.getMessage() for r in caplog.records if r.name == "phalanx.server.access"]
    assert any('"GET /api/v1/experiments/nope" 404' in line for line in lines), lines
    assert not any("hidden" in line for line in lines)


def test_guesses_at_a_short_server_token_are_throttled_per_address(secured: TestClient) -> None:
    """With a hand-picked server token shorter than 32 characters, tokens that could be guesses at
    it are throttled per address, a guess made while throttled is not even checked, and the answer
    says so rather than that this token was wrong."""
    for i in range(5):
        assert secured.get("/api/v1/experiments", headers=_bearer(f"guess-{i}")).status_code == 401
    blocked = secured.get("/api/v1/experiments", headers=_bearer(TOKEN))
    assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) > 0
    assert blocked.json()["error"] == "too_many_attempts"
    assert "was not checked" in blocked.json()["message"] and "short" in blocked.json()["message"]


STRONG = "k3Vq0pZ8yXw2mB7nR5tL1sH9dF4gJ6cA0eU8iO2rT5y"  # secrets.token_urlsafe(32)'s length


@pytest.fixture
def strong(settings: ServerSettings, store: Store) -> Iterator[TestClient]:
    with TestClient(create_app(settings.model_copy(update={"token": STRONG}), store)) as c:
        yield c


def test_a_stale_token_is_throttled_alone_and_never_a_valid_one_from_its_address(
    strong: TestClient, store: Store
) -> None:
    """One cron job with an old token behind an office's NAT used to lock every valid token from
    that address for a minute: now only the failing token waits, and it is not looked up meanwhile."""
    accounts = Accounts(store)
    accounts.add_user("root", None, admin=True)
    accounts.add_user("ada", None)
    mine = accounts.issue_token("ada", "laptop", None)[0]
    stale = accounts.issue_token("ada", "cron", None)[0]
    accounts.revoke_token("ada", "cron")
    for _ in range(5):
        assert strong.get("/api/v1/experiments", headers=_bearer(stale)).status_code == 401
    for _ in range(2):
        held = strong.get("/api/v1/experiments", headers=_bearer(stale))
        assert held.status_code == 429 and "this bearer token was refused" in held.json()["message"]
    assert strong.get("/api/v1/experiments", headers=_bearer(mine)).status_code == 200
    assert strong.get("/api/v1/experiments", headers=_bearer(STRONG)).status_code == 200
    for i in range(7):  # other wrong tokens are checked (and refused) each on their own budget
        assert strong.get("/api/v1/experiments", headers=_bearer(f"guess-{i}")).status_code == 401
    assert strong.get("/api/v1/experiments", headers=_bearer(STRONG)).status_code == 200


def test_issued_tokens_are_never_held_by_guesses_at_a_short_server_token(
    secured: TestClient, store: Store
) -> None:
    accounts = Accounts(store)
    accounts.add_user("root", None, admin=True)
    accounts.add_user("ada", None)
    mine = accounts.issue_token("ada", "laptop", None)[0]
    for i in range(5):
        assert secured.get("/api/v1/experiments", headers=_bearer(f"guess-{i}")).status_code == 401
    assert secured.get("/api/v1/experiments", headers=_bearer("guess-5")).status_code == 429
    assert secured.get("/api/v1/experiments", headers=_bearer(mine)).status_code == 200


def test_a_scripts_wrong_tokens_do_not_lock_people_out_of_the_login_form(secured: TestClient) -> None:
    """Six wrong bearer tokens (a script with a stale PHALANX_TOKEN) from one address locked the
    login form for everyone there for a minute, saying *their* token was wrong."""
    for _ in range(6):
        secured.get("/api/v1/experiments", headers=_bearer("stale"))
    assert secured.post("/login", data={"token": TOKEN}).status_code == 303  # logged in
    for _ in range(5):
        assert secured.post("/login", data={"token": "guess"}).status_code == 401
    blocked = secured.post("/login", data={"token": TOKEN})
    assert blocked.status_code == 429
    assert "was not checked" in blocked.text and "not right" not in blocked.text


def test_replicas_sharing_a_throttled_address_keep_reporting(secured: TestClient, store: Store) -> None:
    """Five wrong tokens typed on the training machine must not cut its replicas off for a minute:
    their experiment tokens (a 256-bit HMAC, no use to a guesser) are throttled each on its own, so
    they are checked and accepted (a forged one refused), while the server's own short token and any
    guess at it stay refused until the window passes."""
    e = fill.experiment(store, status=ExperimentStatus.RUNNING)
    for _ in range(5):
        assert secured.get("/api/v1/experiments", headers=_bearer("guess")).status_code == 401
    assert secured.get("/api/v1/experiments", headers=_bearer(TOKEN)).status_code == 429
    scalar = {"title": "loss", "series": "s", "value": 1.0, "iteration": 0}
    replica = _bearer(experiment_token(TOKEN, e.id))
    sent = secured.post("/api/v1/ingest", json={"events": [_record(e.id, "scalar", scalar)]}, headers=replica)
    assert sent.status_code == 200, sent.text
    assert store.metrics(e.id, "loss")["loss"]["s"].values == [1.0]
    forged = _bearer(experiment_token("not the server's token", e.id))
    assert secured.post("/api/v1/ingest", json={"events": []}, headers=forged).status_code == 401
    listing = secured.get("/api/v1/experiments", headers=replica)  # still only its own records
    assert listing.status_code == 403


def test_right_tokens_and_requests_without_one_spend_no_attempts(secured: TestClient) -> None:
    for _ in range(10):
        assert secured.get("/api/v1/experiments", headers=_bearer(TOKEN)).status_code == 200
        assert secured.get("/api/v1/experiments").status_code == 401
    assert secured.get("/api/v1/experiments", headers=_bearer(TOKEN)).status_code == 200


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_replica_token_no_longer_writes_once_its_experiment_ended_long_ago(
    secured: TestClient, store: Store
) -> None:
    """A token left in a finished pod's environment cannot add records to its experiment nor replace
    its files (a model a teammate downloads later) once the grace for late batches is over."""
    from phalanx.server.routes.ingest import REPLICA_GRACE_SECONDS

    e = fill.experiment(store, status=ExperimentStatus.SUCCEEDED)
    assert store.artifact_store is not None
    store.artifact_store.put_bytes(e.id, "models/model.pt", b"trained weights")
    auth = {"Authorization": f"Bearer {experiment_token(TOKEN, e.id)}"}
    scalar = {"title": "loss", "series": "s", "value": 1.0, "iteration": 0}
    late = secured.post("/api/v1/ingest", json={"events": [_record(e.id, "scalar", scalar)]}, headers=auth)
    assert late.status_code == 200  # just ended: a last batch retried late is still welcome
    store.update_experiment(e.id, finished_at=time.time() - REPLICA_GRACE_SECONDS - 60)
    refused = secured.post(
        "/api/v1/ingest", json={"events": [_record(e.id, "scalar", scalar, 1)]}, headers=auth
    )
    assert refused.status_code == 403 and "ended" in refused.json()["message"]
    put = secured.put(f"/api/v1/experiments/{e.id}/files/models/model.pt", content=b"evil", headers=auth)
    assert put.status_code == 403
    assert store.artifact_store.read_bytes(e.id, "models/model.pt") == b"trained weights"
    # the server's own token still writes it (phalanx sync of an offline spool)
    full = {"Authorization": f"Bearer {TOKEN}"}
    assert (
        secured.post(
            "/api/v1/ingest", json={"events": [_record(e.id, "scalar", scalar, 2)]}, headers=full
        ).status_code
        == 200
    )


def test_the_throttle_forgets_addresses_whose_failures_are_old(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wrong tokens sprayed from many addresses (an IPv6 /64) must not grow the server's memory for
    ever: an address's failures used to be dropped only when that address came back."""
    from phalanx.server import sessions

    clock = [1000.0]
    monkeypatch.setattr(sessions.time, "monotonic", lambda: clock[0])
    throttle = sessions.LoginThrottle(attempts=5, window=60.0)
    for i in range(10_001):
        throttle.failed(f"2001:db8::{i:x}")
    clock[0] += 61.0
    throttle.failed("2001:db8::ffff:1")
    assert len(throttle._failures) <= 2
    assert throttle.retry_after("2001:db8::1") == 0


def test_a_replica_token_numbers_the_starts_of_its_own_experiments_pods_only(
    secured: TestClient, store: Store
) -> None:
    """Each start of a pod's container asks for its PHALANX_ATTEMPT
    (docs/clusters.md#pods-restarted-by-kubernetes)."""
    mine, other = fill.experiment(store, status=ExperimentStatus.RUNNING), fill.experiment(store)
    auth = {"Authorization": f"Bearer {experiment_token(TOKEN, mine.id)}"}

    def ask(exp: str, headers: dict[str, str], **body: object) -> Any:
        return secured.post(f"/api/v1/experiments/{exp}/attempts/next", json=body, headers=headers)

    assert [ask(mine.id, auth, replica="master").json() for _ in range(2)] == [{"attempt": 0}, {"attempt": 1}]
    assert ask(mine.id, auth, replica="worker-0", at_least=3).json() == {"attempt": 3}
    assert ask(other.id, auth, replica="master").status_code == 403
    assert secured.get(f"/api/v1/experiments/{mine.id}/attempts/next", headers=auth).status_code == 403
    assert ask(mine.id, auth, replica="").status_code == 422
    assert ask(mine.id, auth, replica="a\x00b").status_code == 422
    admin = {"Authorization": f"Bearer {TOKEN}"}
    assert ask(other.id, admin, replica="master").json() == {"attempt": 0}
    assert ask("nosuchexperiment", admin, replica="master").status_code == 404


def test_a_replica_token_cannot_make_another_experiments_records_count_as_duplicates(
    secured: TestClient, store: Store
) -> None:
    """Exactly-once keys include the experiment: a replica of A that learnt one of B's stream ids
    and sent A's records under it first must not make B's records with those keys be skipped."""
    mine = fill.experiment(store, status=ExperimentStatus.RUNNING)
    victim = fill.experiment(store, status=ExperimentStatus.RUNNING)
    stolen = "victimhost-4242-0badf00d"
    first = {"Authorization": f"Bearer {experiment_token(TOKEN, mine.id)}"}
    scalar = {"title": "loss", "series": "s", "value": 9.0, "iteration": 0}
    squat = [_record(mine.id, "scalar", scalar, seq, stream=stolen) for seq in range(3)]
    assert secured.post("/api/v1/ingest", json={"events": squat}, headers=first).json() == {"accepted": 3}
    theirs = {"Authorization": f"Bearer {experiment_token(TOKEN, victim.id)}"}
    points = [{**scalar, "value": 0.5 - seq / 10, "iteration": seq} for seq in range(3)]
    batch = [_record(victim.id, "scalar", p, seq, stream=stolen) for seq, p in enumerate(points)]
    r = secured.post("/api/v1/ingest", json={"events": batch}, headers=theirs)
    assert r.status_code == 200 and r.json() == {"accepted": 3}
    assert store.metric_titles(victim.id) == {"loss": ["s"]}
    again = secured.post("/api/v1/ingest", json={"events": batch}, headers=theirs)
    assert again.json() == {"accepted": 0}


def test_only_a_same_site_post_logs_out(secured: TestClient) -> None:
    """A link or an image on any page (a GET, sent with the cookie) or a cross-site form must not
    end the user's session; the UI's Log out button (a same-origin POST) does."""
    cookie = secured.post("/login", data={"token": TOKEN}).cookies[COOKIE]
    secured.cookies.clear()
    copied = {"Cookie": f"{COOKIE}={cookie}"}
    link = secured.get("/logout", headers={**copied, "Sec-Fetch-Site": "cross-site"})
    assert link.status_code == 200 and 'method="post" action="/logout"' in link.text
    assert COOKIE not in link.headers.get("set-cookie", "")
    for cross_site in ({"Origin": "http://attacker.example"}, {"Sec-Fetch-Site": "cross-site"}):
        assert secured.post("/logout", headers={**copied, **cross_site}).status_code == 403
    assert secured.get("/api/v1/experiments", headers=copied).status_code == 200
    out = secured.post("/logout", headers={**copied, "Origin": "http://testserver"})
    assert out.status_code == 303 and out.headers["location"] == "/login"
    assert secured.get("/api/v1/experiments", headers=copied).status_code == 401


def test_the_ui_logs_out_with_a_post(client: TestClient) -> None:
    page = client.get("/").text
    assert '<form class="logout" method="post" action="/logout">' in page
    assert 'href="/logout"' not in page


def test_a_replica_token_can_neither_read_nor_set_its_project_s_alert_hooks(
    secured: TestClient, store: Store
) -> None:
    """A job holds its experiment's token only: with it, it must not point its project's webhooks at
    itself (every later end of the project, reasons included, would go there) nor read them."""
    mine = fill.experiment(store, status=ExperimentStatus.RUNNING)
    auth = {"Authorization": f"Bearer {experiment_token(TOKEN, mine.id)}"}
    hook = {"url": "http://127.0.0.1:9/steal", "events": ["failed"]}
    added = secured.post(f"/api/v1/projects/{mine.project}/alerts", json=hook, headers=auth)
    assert added.status_code == 403, added.text
    for path in ("/api/v1/alerts", f"/api/v1/projects/{mine.project}/alerts"):
        assert secured.get(path, headers=auth).status_code == 403, path
    server = {"Authorization": f"Bearer {TOKEN}"}
    assert secured.get("/api/v1/alerts", headers=server).json() == []  # nothing was added
