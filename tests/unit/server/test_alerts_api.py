"""A project's alert hooks through the API: who may add, see and remove them, and a failed
experiment's webhook reaching a real receiver on loopback once, signed, from the server's own
deliverer thread (the app's lifespan starts it)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from phalanx.domain import ExperimentStatus, GroupStatus, ReplicaState, Trial, TrialState
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store.base import Store
from phalanx.store.sql import SqlStore
from phalanx.store.sql.alert_rows import AlertHookRow
from tests.support.webhooks import Receiver
from tests.unit.server import fill
from tests.unit.server.teams_fixtures import Team, make_group, make_team

API = "/api/v1"
SLACK = "https://hooks.slack.example/services/T0/B0/XXXX"


@pytest.fixture
def team(store: Store) -> Team:
    return make_team(store)


@pytest.fixture
def client(settings: ServerSettings, store: Store, team: Team) -> Iterator[TestClient]:
    fast = settings.model_copy(
        update={
            "alert_poll_seconds": 0.05,
            "public_url": "https://phalanx.example/",
            "hook_allow": ("127.0.0.1", "10.0.0.7"),
        }
    )
    with TestClient(create_app(fast, store)) as c:
        yield c


def _as(team: Team, who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {team.tokens[who]}"}


def _add(client: TestClient, team: Team, who: str, url: str = SLACK, **more: object) -> object:
    return client.post(
        f"{API}/projects/A/alerts", json={"url": url, "events": ["failed"], **more}, headers=_as(team, who)
    )


def _settled(client: TestClient, team: Team, hook: str) -> list[dict[str, object]]:
    """The hook's delivery log once nothing in it is pending (the deliverer records a try after
    the receiver answered it); a generous deadline is only a safety net."""
    deadline = time.monotonic() + 120
    while True:
        log: list[dict[str, object]] = client.get(
            f"{API}/alerts/{hook}/deliveries", headers=_as(team, "viewer_a")
        ).json()
        if all(d["state"] != "pending" for d in log) or time.monotonic() > deadline:
            return log
        time.sleep(0.05)


def test_editors_add_hooks_viewers_see_them_cut_and_others_not_at_all(client: TestClient, team: Team) -> None:
    r = _add(client, team, "viewer_a")
    assert r.status_code == 403 and "this needs editor" in r.json()["message"]
    r = _add(client, team, "none")
    assert r.status_code == 404 and "not a member" in r.json()["message"]
    r = _add(client, team, "editor_a")
    assert r.status_code == 201
    created = r.json()
    assert len(created["secret"]) == 64 and created["created_by"] == "editor_a"  # the secret: this once

    seen_by_viewer = client.get(f"{API}/projects/A/alerts", headers=_as(team, "viewer_a")).json()
    assert [h["url"] for h in seen_by_viewer] == ["https://hooks.slack.example/…"]  # its path is a credential
    seen_by_editor = client.get(f"{API}/alerts", headers=_as(team, "editor_a")).json()
    assert [h["url"] for h in seen_by_editor] == [SLACK]
    assert all(h["secret"] is None for h in seen_by_viewer + seen_by_editor)
    assert client.get(f"{API}/alerts", headers=_as(team, "admin_b")).json() == []  # not B's

    hook = created["id"]
    assert client.delete(f"{API}/alerts/{hook}", headers=_as(team, "viewer_a")).status_code == 403
    assert client.delete(f"{API}/alerts/{hook}", headers=_as(team, "admin_b")).status_code == 404
    assert client.get(f"{API}/alerts/{hook}/deliveries", headers=_as(team, "viewer_a")).json() == []
    assert client.delete(f"{API}/alerts/{hook}", headers=_as(team, "editor_a")).status_code == 204
    assert client.get(f"{API}/alerts", headers=_as(team, "root")).json() == []


def test_a_bad_hook_is_a_400_that_says_how_to_fix_it(client: TestClient, team: Team) -> None:
    r = _add(client, team, "editor_a", url="file:///etc/passwd")
    assert r.status_code == 400 and "http:// or https://" in r.json()["message"]
    r = client.post(
        f"{API}/projects/A/alerts", json={"url": SLACK, "events": ["done"]}, headers=_as(team, "editor_a")
    )
    assert r.status_code == 400 and "failed,succeeded,stopped" in r.json()["message"]
    r = client.delete(f"{API}/alerts/not-a-hook", headers=_as(team, "editor_a"))
    assert r.status_code == 400 and "not a hook id" in r.json()["message"]
    for url in ("https://user:s3cr3t@hooks.example.org/x", "https://hooks.example.org/x#token=s3cr3t"):
        r = _add(client, team, "editor_a", url=url)
        assert r.status_code == 400 and "a user, password or #fragment" in r.json()["message"], url
        assert "s3cr3t" not in r.json()["message"]
    r = _add(client, team, "editor_a", url='https://hooks.example.org/"><img src=x onerror=alert(1)>')
    assert r.status_code == 400 and "a space is written %20" in r.json()["message"]
    assert client.get(f"{API}/alerts", headers=_as(team, "root")).json() == []  # nothing half-kept


def test_a_viewer_sees_a_hooks_scheme_host_and_port_only(client: TestClient, team: Team) -> None:
    for url in ("https://hooks.example.org", "http://10.0.0.7:8443/hook?key=s3cr3t"):
        assert _add(client, team, "editor_a", url=url).status_code == 201
    seen = client.get(f"{API}/alerts", headers=_as(team, "viewer_a")).json()
    assert sorted(h["url"] for h in seen) == ["http://10.0.0.7:8443/…", "https://hooks.example.org/…"]


def test_a_hook_that_cannot_be_sent_fails_its_own_try_and_the_others_go_out(
    client: TestClient, team: Team, store: SqlStore
) -> None:
    """A hook kept before its address was checked this strictly (a user and password in it, which
    urllib cannot send) must never stop the deliverer's round: its try fails, the others are sent."""
    with Receiver() as receiver:
        good = _add(client, team, "editor_a", url=receiver.url).json()["id"]
        bad = _add(client, team, "editor_a", url="https://hooks.example.org/x").json()["id"]
        with store.engine.begin() as conn:  # as an older Phalanx kept it
            conn.execute(
                update(AlertHookRow).where(AlertHookRow.c.id == bad).values(url="https://u:p@host:x/")
            )
        exp = fill.experiment(store, name="resnet", project="A", status=ExperimentStatus.RUNNING)
        store.update_experiment(exp.id, status=ExperimentStatus.FAILED, reason="worker-0 failed")
        (got,) = receiver.wait_for(1)
        assert json.loads(got.body)["experiment_id"] == exp.id
        (failed,) = _settled_try(client, team, bad)
    assert failed["state"] == "pending" and failed["attempts"][0]["status_code"] is None
    assert "InvalidURL" in failed["attempts"][0]["error"] and good


def _settled_try(client: TestClient, team: Team, hook: str) -> list[dict[str, object]]:
    """The hook's delivery log once its first try is recorded."""
    deadline = time.monotonic() + 120
    while True:
        log: list[dict[str, object]] = client.get(
            f"{API}/alerts/{hook}/deliveries", headers=_as(team, "editor_a")
        ).json()
        if (log and log[0]["attempts"]) or time.monotonic() > deadline:
            return log
        time.sleep(0.05)


def test_a_failed_experiments_webhook_arrives_once_signed_with_the_failing_replicas_reason(
    client: TestClient, team: Team, store: Store
) -> None:
    with Receiver() as receiver:
        secret = "receiver-shared-secret-0123456789"
        hook = _add(client, team, "editor_a", url=receiver.url, secret=secret).json()["id"]
        exp = fill.experiment(store, name="resnet", project="A", status=ExperimentStatus.RUNNING)
        store.update_replica(exp.id, "worker-0", state=ReplicaState.FAILED, reason="exited with code 3")
        store.update_experiment(exp.id, status=ExperimentStatus.FAILED, reason="worker-0 failed")
        store.update_experiment(exp.id, status=ExperimentStatus.FAILED)  # an end written twice: one event
        (got,) = receiver.wait_for(1)
        log = _settled(client, team, hook)
    assert got.signed_by(secret) and got.headers["content-type"] == "application/json"
    body = json.loads(got.body)
    assert body["event"] == "experiment.failed" and got.headers["x-phalanx-event"] == "experiment.failed"
    assert (body["experiment_id"], body["name"], body["project"]) == (exp.id, "resnet", "A")
    assert (body["status"], body["reason"], body["replica"]) == ("failed", "exited with code 3", "worker-0")
    assert body["url"] == f"https://phalanx.example/experiments/{exp.id}"
    assert body["text"].startswith(f"phalanx: experiment resnet ({exp.id}) of A failed")  # Slack shows it
    (delivery,) = log
    assert delivery["id"] == got.headers["x-phalanx-delivery"] == body["delivery"]
    assert delivery["state"] == "delivered" and [a["status_code"] for a in delivery["attempts"]] == [200]
    assert len(receiver.received) == 1


def _finished_group(client: TestClient, team: Team, store: Store, url: str) -> tuple[str, str, str]:
    """A hook of A told of group.finished (added through the API), and a group of A that ends with
    one trial: (hook id, group id, the trial's experiment id)."""
    r = client.post(
        f"{API}/projects/A/alerts",
        json={"url": url, "events": ["group.finished"], "secret": "receiver-shared-secret-0123"},
        headers=_as(team, "editor_a"),
    )
    assert r.status_code == 201
    groups = store
    group = make_group(store, "A")
    exp = fill.experiment(store, name="search-0", project="A")
    groups.add_trial(Trial(group.id, 0, exp.id, {"x": 1}, TrialState.DONE, value=0.5))
    groups.update_group(group.id, status=GroupStatus.SUCCEEDED)
    return r.json()["id"], group.id, exp.id


def test_a_finished_groups_webhook_arrives_signed_with_its_best_trial(
    client: TestClient, team: Team, store: Store
) -> None:
    with Receiver() as receiver:
        _, group_id, exp_id = _finished_group(client, team, store, receiver.url)
        (got,) = receiver.wait_for(1)
    body = json.loads(got.body)
    assert got.signed_by("receiver-shared-secret-0123") and got.headers["x-phalanx-event"] == "group.finished"
    assert (body["event"], body["group_id"], body["status"]) == ("group.finished", group_id, "succeeded")
    assert (body["best"]["experiment_id"], body["best"]["params"]) == (exp_id, {"x": 1})
    assert body["url"] == f"https://phalanx.example/groups/{group_id}"


def test_a_groups_delivery_is_logged_naming_its_group(client: TestClient, team: Team, store: Store) -> None:
    hook, group_id, _ = _finished_group(client, team, store, "http://127.0.0.1:9/nobody")
    r = client.get(f"{API}/alerts/{hook}/deliveries", headers=_as(team, "viewer_a"))
    assert r.status_code == 200
    (delivery,) = r.json()
    assert (delivery["group_id"], delivery["experiment_id"]) == (group_id, None)
    assert delivery["event"] == "group.finished"
