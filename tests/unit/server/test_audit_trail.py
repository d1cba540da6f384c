"""Every mutating route of the API leaves an audit entry: who, what, which target, and the previous
value where one is replaced. The routes are enumerated from the OpenAPI document, so a route added
later without a call here (and so without a checked entry) fails this test."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from phalanx.domain import ExperimentStatus
from phalanx.machine.ledger import Capacity, Need
from phalanx.queue import ledger_for
from phalanx.runner.resuming import Resume
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store.accounts import Role
from phalanx.store.base import LocalStore
from tests.support.onnx_models import random_linear, record_model
from tests.unit.server import fill
from tests.unit.server.model_checks import checking_models_in_process
from tests.unit.server.teams_fixtures import Team, make_group, make_team
from tests.unit.server.test_durable_submit import bundle

API = "/api/v1"
HUGE = Capacity(cpus=tuple(range(4096)), gpus=(), memory_mib=1e9)
# records and files a replica sends through ingest: its own data, not a change a person made
NOT_CHANGES = {
    ("POST", f"{API}/ingest"),
    ("POST", f"{API}/experiments/{{experiment_id}}/attempts/next"),
}


@dataclass
class World:
    client: TestClient
    store: LocalStore
    team: Team
    exp: str  # a finished experiment of project A with an ONNX model
    running: str  # a running experiment of A (its supervisor gone: a stop ends it)
    group: str
    settings: ServerSettings
    hook: str = ""  # the alert hook _alert_add made
    board: str = ""  # the TensorBoard _board_start started

    def auth(self, who: str = "root") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.team.tokens[who]}"}


Call = Callable[[World], tuple[int, str, str, str | None]]  # status, action, target, detail contains


def _submit(w: World) -> tuple[int, str, str, str | None]:
    text = "version: 1\nkind: experiment\nproject: A\nrun:\n  cmd: python train.py\n"
    r = w.client.post(
        f"{API}/experiments",
        data={"file_name": "exp.yml", "file_text": text},
        files={"bundle": ("code.tar.gz", bundle(), "application/gzip")},
        headers=w.auth("editor_a"),
    )
    return r.status_code, "experiment.submit", r.json().get("id", ""), None


def _annotate(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.patch(f"{API}/experiments/{w.exp}", json={"tags": ["best"]}, headers=w.auth())
    return r.status_code, "experiment.annotate", w.exp, None


def _stop(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.post(f"{API}/experiments/{w.running}/stop", headers=w.auth())
    return r.status_code, "experiment.stop", w.running, None


class FakeStart:
    """Stands in for the launcher's start of a resuming supervisor (tests/unit starts no process;
    tests/integration/server/test_remote_commands.py resumes one for real)."""

    def __init__(self) -> None:
        self.started: list[str | None] = []

    def __call__(self, planned: Resume) -> None:
        self.started.append(planned.options.experiment_id)


def _resume(w: World) -> tuple[int, str, str, str | None]:
    text = "version: 1\nkind: experiment\nrun:\n  cmd: python train.py\n"
    failed = fill.experiment(w.store, project="A", status=ExperimentStatus.FAILED, spec_text=text).id
    w.store.set_repro(failed, {"launch": {"file": "exp.yml", "workdir": str(w.settings.store.home)}})
    start = FakeStart()
    w.client.app.state.launcher.resume = start  # type: ignore[attr-defined]
    r = w.client.post(f"{API}/experiments/{failed}/resume", headers=w.auth("editor_a"))
    assert start.started == [failed], r.text
    return r.status_code, "experiment.resume", failed, None


def _delete(w: World) -> tuple[int, str, str, str | None]:
    gone = fill.experiment(w.store, project="A").id
    r = w.client.delete(f"{API}/experiments/{gone}", headers=w.auth())
    return r.status_code, "experiment.delete", gone, None


def _group_stop(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.post(f"{API}/groups/{w.group}/stop", headers=w.auth())
    return r.status_code, "group.stop", w.group, None


def _group_delete(w: World) -> tuple[int, str, str, str | None]:
    ended = make_group(w.store, "A")
    w.store.update_group(ended.id, status="succeeded")
    r = w.client.delete(f"{API}/groups/{ended.id}", headers=w.auth())
    return r.status_code, "group.delete", ended.id, "0 experiments"


def _secret_set(w: World) -> tuple[int, str, str, str | None]:
    w.client.put(f"{API}/projects/A/secrets/API_KEY", json={"value": "one"}, headers=w.auth())
    r = w.client.put(f"{API}/projects/A/secrets/API_KEY", json={"value": "two"}, headers=w.auth())
    return r.status_code, "secret.set", "A/API_KEY", "replaced"


def _secret_rm(w: World) -> tuple[int, str, str, str | None]:
    w.client.put(f"{API}/projects/A/secrets/GONE", json={"value": "x"}, headers=w.auth())
    r = w.client.delete(f"{API}/projects/A/secrets/GONE", headers=w.auth())
    return r.status_code, "secret.remove", "A/GONE", None


def _token_issue(w: World) -> tuple[int, str, str, str | None]:
    w.team.accounts.set_password("spare", "correct horse battery")
    body = {"username": "spare", "password": "correct horse battery", "name": "laptop"}
    r = w.client.post(f"{API}/tokens", json=body)
    return r.status_code, "token.issue", "spare/laptop", None


def _token_revoke(w: World) -> tuple[int, str, str, str | None]:
    w.team.accounts.issue_token("editor_a", "old", None)
    r = w.client.delete(f"{API}/tokens/old", headers=w.auth("editor_a"))
    return r.status_code, "token.revoke", "editor_a/old", None


def _member_set(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.put(f"{API}/projects/A/members/viewer_a", json={"role": "editor"}, headers=w.auth())
    return r.status_code, "member.set", "A/viewer_a", "previous: viewer"


def _member_rm(w: World) -> tuple[int, str, str, str | None]:
    w.team.accounts.set_member("A", "spare", Role.viewer)
    r = w.client.delete(f"{API}/projects/A/members/spare", headers=w.auth())
    return r.status_code, "member.remove", "A/spare", "previous: viewer"


def _user_add(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.post(f"{API}/admin/users", json={"name": "newcomer", "admin": True}, headers=w.auth())
    return r.status_code, "user.add", "newcomer", "admin"


def _user_change(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.patch(f"{API}/admin/users/spare", json={"disabled": True}, headers=w.auth())
    return r.status_code, "user.disable", "spare", None


def _project_add(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.post(f"{API}/admin/projects", json={"name": "C"}, headers=w.auth())
    return r.status_code, "project.add", "C", None


def _cluster_add(w: World) -> tuple[int, str, str, str | None]:
    body = {"name": "hpc", "kind": "slurm", "partition": "gpu"}
    r = w.client.post(f"{API}/admin/clusters", json=body, headers=w.auth())
    return r.status_code, "cluster.add", "hpc", "slurm"


def _cluster_map(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.put(f"{API}/admin/placements/hpc/A", json={"account": "vision-lab"}, headers=w.auth())
    return r.status_code, "cluster.map", "hpc/A", "account vision-lab"


def _cluster_unmap(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.delete(f"{API}/admin/placements/hpc/A", headers=w.auth())
    return r.status_code, "cluster.unmap", "hpc/A", None


def _cluster_rm(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.delete(f"{API}/admin/clusters/hpc", headers=w.auth())
    return r.status_code, "cluster.remove", "hpc", None


def _alert_add(w: World) -> tuple[int, str, str, str | None]:
    doc = {"url": "https://hooks.example/services/T0/B0/XXXX", "events": ["failed"]}
    r = w.client.post(f"{API}/projects/A/alerts", json=doc, headers=w.auth("editor_a"))
    w.hook = r.json()["id"]
    return r.status_code, "alert.add", w.hook, "https://hooks.example/… on failed"


def _alert_rm(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.delete(f"{API}/alerts/{w.hook}", headers=w.auth("editor_a"))
    return r.status_code, "alert.remove", w.hook, None


def _board_start(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.post(f"{API}/services", json={"group": w.group}, headers=w.auth("viewer_a"))
    w.board = r.json()["id"]
    return r.status_code, "service.start", w.board, f"tensorboard of group {w.group}"


def _board_stop(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.delete(f"{API}/services/{w.board}", headers=w.auth("viewer_a"))
    return r.status_code, "service.stop", w.board, "tensorboard of group"


def _quota_set(w: World) -> tuple[int, str, str, str | None]:
    w.client.put(f"{API}/projects/A/quota", json={"cores": 2}, headers=w.auth())
    r = w.client.put(f"{API}/projects/A/quota", json={"cores": 4}, headers=w.auth())
    return r.status_code, "quota.set", "A/local", "cores=4; previous: cores=2"


def _quota_rm(w: World) -> tuple[int, str, str, str | None]:
    w.client.put(f"{API}/projects/B/quota", json={"gpus": 1}, headers=w.auth())
    r = w.client.delete(f"{API}/projects/B/quota", headers=w.auth())
    return r.status_code, "quota.remove", "B/local", "previous: gpus=1"


def _file_put(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.put(f"{API}/experiments/{w.exp}/files/notes.txt", content=b"by hand", headers=w.auth())
    return (
        r.status_code,
        f"PUT {API}/experiments/{{experiment_id}}/files/{{path}}",
        f"{w.exp}/notes.txt",
        None,
    )


def _register(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.post(f"{API}/models/digits/versions", json={"experiment_id": w.exp}, headers=w.auth())
    return r.status_code, "model.register", "digits/1", f"from {w.exp}"


def _model_update(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.patch(f"{API}/models/digits", json={"description": "a digit classifier"}, headers=w.auth())
    return r.status_code, "model.update", "digits", "a digit classifier"


def _version_update(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.patch(f"{API}/models/digits/versions/1", json={"tags": {"ok": "yes"}}, headers=w.auth())
    return r.status_code, "model.version.update", "digits/1", None


def _alias_set(w: World) -> tuple[int, str, str, str | None]:
    w.client.put(f"{API}/models/digits/aliases/prod", json={"version": 1}, headers=w.auth())
    w.client.post(f"{API}/models/digits/versions", json={"experiment_id": w.exp}, headers=w.auth())
    r = w.client.put(f"{API}/models/digits/aliases/prod", json={"version": 2}, headers=w.auth())
    return r.status_code, "model.alias.set", "digits@prod", "version 2; previous: version 1"


def _priority(w: World) -> tuple[int, str, str, str | None]:
    waiting = fill.experiment(w.store, project="A", status=ExperimentStatus.QUEUED).id
    ledger = ledger_for(w.settings.store)
    ledger.admit("holder0000aa", Need(cpus=4096), HUGE, pid=os.getpid(), project="B")  # takes every core
    ledger.admit(waiting, Need(cpus=1), HUGE, pid=os.getpid(), project="A")  # so this one waits
    r = w.client.patch(f"{API}/queue/{waiting}", json={"priority": 7}, headers=w.auth())
    return r.status_code, "queue.priority", waiting, "7"


def _alias_rm(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.delete(f"{API}/models/digits/aliases/prod", headers=w.auth())
    return r.status_code, "model.alias.remove", "digits@prod", "previous: version 2"


def _version_rm(w: World) -> tuple[int, str, str, str | None]:
    w.client.put(f"{API}/models/digits/aliases/old", json={"version": 1}, headers=w.auth())
    r = w.client.delete(f"{API}/models/digits/versions/1", headers=w.auth())
    return r.status_code, "model.version.remove", "digits/1", "digits@1 @old"


def _model_rm(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.delete(f"{API}/models/digits", headers=w.auth())
    return r.status_code, "model.remove", "digits", "digits@2"


def _datastore_add(w: World) -> tuple[int, str, str, str | None]:
    lake = w.settings.store.home / "lake"
    (lake / "digits").mkdir(parents=True, exist_ok=True)
    (lake / "digits" / "a.csv").write_text("1\n")
    body = {"name": "lake", "url": str(lake), "project": "A"}
    r = w.client.post(f"{API}/datastores", json=body, headers=w.auth())  # a server folder: an admin's
    return r.status_code, "datastore.add", "lake", str(lake)


def _dataset_add(w: World) -> tuple[int, str, str, str | None]:
    body = {"name": "digits", "source": "lake:digits", "project": "A"}
    r = w.client.post(f"{API}/datasets", json=body, headers=w.auth("editor_a"))
    return r.status_code, "dataset.add", "digits@1", "new"


def _dataset_rm(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.delete(f"{API}/datasets/digits", headers=w.auth("editor_a"))
    return r.status_code, "dataset.remove", "digits", "digits@1"


def _datastore_rm(w: World) -> tuple[int, str, str, str | None]:
    r = w.client.delete(f"{API}/datastores/lake", headers=w.auth("editor_a"))
    return r.status_code, "datastore.remove", "lake", None


# (method, path template) -> a successful call and the entry it must leave; in an order where each
# call finds what an earlier one made (the model's versions and aliases)
CALLS: dict[tuple[str, str], Call] = {
    ("POST", f"{API}/experiments"): _submit,
    ("PATCH", f"{API}/experiments/{{experiment_id}}"): _annotate,
    ("POST", f"{API}/experiments/{{experiment_id}}/stop"): _stop,
    ("POST", f"{API}/experiments/{{experiment_id}}/resume"): _resume,
    ("DELETE", f"{API}/experiments/{{experiment_id}}"): _delete,
    ("POST", f"{API}/groups/{{group_id}}/stop"): _group_stop,
    ("DELETE", f"{API}/groups/{{group_id}}"): _group_delete,
    ("PUT", f"{API}/projects/{{project}}/secrets/{{name}}"): _secret_set,
    ("DELETE", f"{API}/projects/{{project}}/secrets/{{name}}"): _secret_rm,
    ("POST", f"{API}/tokens"): _token_issue,
    ("DELETE", f"{API}/tokens/{{name}}"): _token_revoke,
    ("PUT", f"{API}/projects/{{project}}/members/{{user}}"): _member_set,
    ("DELETE", f"{API}/projects/{{project}}/members/{{user}}"): _member_rm,
    ("POST", f"{API}/admin/users"): _user_add,
    ("PATCH", f"{API}/admin/users/{{name}}"): _user_change,
    ("POST", f"{API}/admin/projects"): _project_add,
    ("POST", f"{API}/admin/clusters"): _cluster_add,
    ("PUT", f"{API}/admin/placements/{{cluster}}/{{project}}"): _cluster_map,
    ("DELETE", f"{API}/admin/placements/{{cluster}}/{{project}}"): _cluster_unmap,
    ("DELETE", f"{API}/admin/clusters/{{name}}"): _cluster_rm,
    ("PUT", f"{API}/projects/{{project}}/quota"): _quota_set,
    ("DELETE", f"{API}/projects/{{project}}/quota"): _quota_rm,
    ("POST", f"{API}/projects/{{project}}/alerts"): _alert_add,
    ("DELETE", f"{API}/alerts/{{hook_id}}"): _alert_rm,
    ("PUT", f"{API}/experiments/{{experiment_id}}/files/{{path}}"): _file_put,
    ("POST", f"{API}/models/{{name}}/versions"): _register,
    ("PATCH", f"{API}/models/{{name}}"): _model_update,
    ("PATCH", f"{API}/models/{{name}}/versions/{{version}}"): _version_update,
    ("PUT", f"{API}/models/{{name}}/aliases/{{alias}}"): _alias_set,
    ("DELETE", f"{API}/models/{{name}}/aliases/{{alias}}"): _alias_rm,
    ("DELETE", f"{API}/models/{{name}}/versions/{{version}}"): _version_rm,
    ("DELETE", f"{API}/models/{{name}}"): _model_rm,
    ("PATCH", f"{API}/queue/{{experiment_id}}"): _priority,
    ("POST", f"{API}/datastores"): _datastore_add,
    ("POST", f"{API}/datasets"): _dataset_add,
    ("DELETE", f"{API}/datasets/{{name}}"): _dataset_rm,
    ("DELETE", f"{API}/datastores/{{name}}"): _datastore_rm,
    ("POST", f"{API}/services"): _board_start,
    ("DELETE", f"{API}/services/{{service_id}}"): _board_stop,
}


def mutating_routes(client: TestClient) -> set[tuple[str, str]]:
    doc = client.app.openapi()  # type: ignore[attr-defined]
    found = set()
    for path, operations in doc["paths"].items():
        for method in operations:
            if method.upper() in ("POST", "PUT", "PATCH", "DELETE"):
                found.add((method.upper(), path))
    return found


@pytest.fixture
def world(settings: ServerSettings, store: LocalStore) -> World:
    team = make_team(store)
    exp = fill.experiment(store, project="A").id
    record_model(store, exp, "digits", random_linear(7))
    running = fill.experiment(store, project="A", status=ExperimentStatus.RUNNING).id
    group = make_group(store, "A").id
    client = TestClient(checking_models_in_process(create_app(settings, store)))  # (the test seam)
    return World(client, store, team, exp, running, group, settings)


@pytest.mark.usefixtures("started_without_a_process")
def test_every_mutating_route_leaves_an_audit_entry(world: World) -> None:
    routes = mutating_routes(world.client)
    unlisted = sorted(routes - set(CALLS) - NOT_CHANGES)
    assert not unlisted, (
        f"mutating routes with no call in CALLS (add one, and say what its audit entry is): {unlisted}"
    )
    stale = sorted(set(CALLS) - routes)
    assert not stale, f"CALLS names routes the API no longer has: {stale}"
    trail = world.team.accounts
    for route, call in CALLS.items():
        before = len(trail.audit_trail(10_000))
        status, action, target, detail = call(world)
        assert status < 400, f"{route}: the call failed ({status}); fix the call"
        entries = trail.audit_trail(10_000)[before:]
        mine = [e for e in entries if e.action == action and e.target == target]
        assert mine, f"{route} left no {action} entry for {target}; it left {[vars(e) for e in entries]}"
        if detail is not None:
            assert detail in (mine[-1].detail or ""), f"{route}: {mine[-1].detail!r} lacks {detail!r}"
        assert mine[-1].actor != "", route


def test_a_secret_value_never_reaches_the_trail(world: World) -> None:
    world.client.put(f"{API}/projects/A/secrets/TOKEN", json={"value": "s3cr3t-value"}, headers=world.auth())
    assert all("s3cr3t-value" not in str(vars(e)) for e in world.team.accounts.audit_trail(10_000))


def test_replica_records_and_refusals_are_not_changes_unless_asked(
    settings: ServerSettings, store: LocalStore
) -> None:
    team = make_team(store)
    exp = fill.experiment(store, project="A").id
    for refusals in (False, True):
        client = TestClient(create_app(settings.model_copy(update={"audit_refusals": refusals}), store))
        before = len(team.accounts.audit_trail(10_000))
        r = client.post(
            f"{API}/experiments/{exp}/stop", headers={"Authorization": f"Bearer {team.tokens['viewer_a']}"}
        )
        assert r.status_code == 403
        entries = team.accounts.audit_trail(10_000)[before:]
        assert [(e.actor, e.action) for e in entries] == ([("viewer_a", "refused")] if refusals else [])
