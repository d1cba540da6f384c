"""Every route declares who may call it, and the server holds to it for every role.

The table below is the contract: each API route and UI page with its rule. A route added without
a policy fails ``test_every_route_declares_a_policy``; a policy changed without the table fails
``test_the_declared_policies_are_the_table``; and ``test_every_route_answers_each_role_as_the_table_says``
calls every method of every route as each role and checks the answer (403 for a role too low,
404 where the caller is in none of the project's roles, never a 500)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient

from phalanx.server.app import create_app
from phalanx.server.policy import declared_routes, policy
from phalanx.server.settings import ServerSettings
from phalanx.store.alerts import alert_book
from phalanx.store.base import Store
from phalanx.store.registry import registry_store
from tests.unit.server import fill
from tests.unit.server.fake_services import FakeBoard
from tests.unit.server.teams_fixtures import ROLES, Team, make_group, make_model, make_team

TABLE: dict[tuple[str, str], str] = {
    ("GET", "/api/v1/health"): "public",
    ("GET", "/api/v1/experiments"): "signed-in",
    ("GET", "/api/v1/experiments.csv"): "signed-in",
    ("GET", "/api/v1/columns"): "signed-in",
    ("GET", "/api/v1/sweep"): "signed-in",
    ("POST", "/api/v1/experiments"): "body",
    ("POST", "/api/v1/ingest"): "body",
    ("GET", "/api/v1/experiments/{experiment_id}"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/replicas"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/texts"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/submission"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/metrics"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/metrics/{title:path}"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/params"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/artifacts"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/artifacts/{name:path}"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/files"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/files/{path:path}"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/inputs"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/inputs/{name}/files/{path:path}"): "experiment:viewer",
    ("GET", "/api/v1/datasets"): "signed-in",
    ("GET", "/api/v1/datasets/{name}/versions/{version}"): "signed-in",
    ("POST", "/api/v1/datasets"): "body",
    ("GET", "/api/v1/datasets/{name}/versions/{version}/files/{path:path}"): "signed-in",
    ("DELETE", "/api/v1/datasets/{name}"): "signed-in",
    ("GET", "/api/v1/datasets/{name}/readers"): "signed-in",
    ("GET", "/api/v1/datastores"): "signed-in",
    ("GET", "/api/v1/datastores/{name}"): "signed-in",
    ("POST", "/api/v1/datastores"): "body",
    ("DELETE", "/api/v1/datastores/{name}"): "signed-in",
    ("GET", "/api/v1/experiments/{experiment_id}/previews/{name:path}"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/models"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/models/{name:path}"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/logs"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/logs.txt"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/logs/stream"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/checkpoints"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/run"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/source"): "experiment:viewer",
    ("GET", "/api/v1/experiments/{experiment_id}/diff/{other_id}"): "experiment:viewer",
    ("PATCH", "/api/v1/experiments/{experiment_id}"): "experiment:editor",
    ("POST", "/api/v1/experiments/{experiment_id}/stop"): "experiment:editor",
    ("POST", "/api/v1/experiments/{experiment_id}/resume"): "experiment:editor",
    ("PUT", "/api/v1/experiments/{experiment_id}/files/{path:path}"): "experiment:editor",
    ("POST", "/api/v1/experiments/{experiment_id}/attempts/next"): "experiment:editor",
    ("DELETE", "/api/v1/experiments/{experiment_id}"): "experiment:admin",
    ("GET", "/api/v1/groups"): "signed-in",
    ("GET", "/api/v1/groups/{group_id}"): "group:viewer",
    ("POST", "/api/v1/groups/{group_id}/stop"): "group:editor",
    ("DELETE", "/api/v1/groups/{group_id}"): "group:admin",
    # a model belongs to the project of the experiment it was first registered from (model "x": A)
    ("GET", "/api/v1/models"): "signed-in",
    ("GET", "/api/v1/models/{name}"): "model:viewer",
    ("GET", "/api/v1/models/{name}/versions/{version}"): "model:viewer",
    ("GET", "/api/v1/models/{name}/versions/{version}/file"): "model:viewer",
    ("GET", "/api/v1/models/{name}/aliases/{alias}"): "model:viewer",
    ("PATCH", "/api/v1/models/{name}"): "model:editor",
    ("POST", "/api/v1/models/{name}/versions"): "any:editor",
    ("PATCH", "/api/v1/models/{name}/versions/{version}"): "model:editor",
    ("PUT", "/api/v1/models/{name}/aliases/{alias}"): "model:editor",
    ("DELETE", "/api/v1/models/{name}/aliases/{alias}"): "model:editor",
    ("DELETE", "/api/v1/models/{name}"): "model:editor",
    ("DELETE", "/api/v1/models/{name}/versions/{version}"): "model:editor",
    ("GET", "/api/v1/queue"): "signed-in",
    ("GET", "/api/v1/compare"): "signed-in",
    ("GET", "/api/v1/metrics/{title:path}"): "signed-in",
    ("PATCH", "/api/v1/queue/{experiment_id}"): "experiment:editor",
    ("GET", "/api/v1/targets"): "signed-in",
    ("POST", "/api/v1/tokens"): "public",
    ("GET", "/api/v1/tokens"): "signed-in",
    ("DELETE", "/api/v1/tokens/{name}"): "signed-in",
    ("GET", "/api/v1/me"): "signed-in",
    ("GET", "/api/v1/projects/{project}/members"): "project:viewer",
    ("PUT", "/api/v1/projects/{project}/members/{user}"): "project:admin",
    ("DELETE", "/api/v1/projects/{project}/members/{user}"): "project:admin",
    ("GET", "/api/v1/admin/audit"): "site:admin",
    ("GET", "/api/v1/admin/users"): "site:admin",
    ("POST", "/api/v1/admin/users"): "site:admin",
    ("PATCH", "/api/v1/admin/users/{name}"): "site:admin",
    ("GET", "/api/v1/admin/projects"): "site:admin",
    ("POST", "/api/v1/admin/projects"): "site:admin",
    ("GET", "/api/v1/admin/clusters"): "site:admin",
    ("POST", "/api/v1/admin/clusters"): "site:admin",
    ("DELETE", "/api/v1/admin/clusters/{name}"): "site:admin",
    ("GET", "/api/v1/admin/placements"): "site:admin",
    ("PUT", "/api/v1/admin/placements/{cluster}/{project}"): "site:admin",
    ("DELETE", "/api/v1/admin/placements/{cluster}/{project}"): "site:admin",
    # quotas are the server's to hand out: a project admin reads its own, only a server admin sets them
    ("GET", "/api/v1/projects/{project}/quota"): "project:viewer",
    ("PUT", "/api/v1/projects/{project}/quota"): "site:admin",
    ("DELETE", "/api/v1/projects/{project}/quota"): "site:admin",
    ("GET", "/api/v1/quotas"): "site:admin",
    ("GET", "/api/v1/projects/{project}/secrets"): "project:editor",
    ("PUT", "/api/v1/projects/{project}/secrets/{name}"): "project:admin",
    ("DELETE", "/api/v1/projects/{project}/secrets/{name}"): "project:admin",
    # alert hooks: a project's editors add and remove them, its viewers see them (URLs cut to the host)
    ("GET", "/api/v1/alerts"): "signed-in",
    ("GET", "/api/v1/projects/{project}/alerts"): "project:viewer",
    ("POST", "/api/v1/projects/{project}/alerts"): "project:editor",
    ("DELETE", "/api/v1/alerts/{hook_id}"): "alert:editor",
    ("GET", "/api/v1/alerts/{hook_id}/deliveries"): "alert:viewer",
    # services (TensorBoard): a project's viewers start, reach and stop them; the proxy is the service
    ("POST", "/api/v1/services"): "body",
    ("GET", "/api/v1/services"): "signed-in",
    ("GET", "/api/v1/services/{service_id}"): "service:viewer",
    ("DELETE", "/api/v1/services/{service_id}"): "service:viewer",
    ("GET", "/services/{service_id}"): "service:viewer",
    ("GET", "/services/{service_id}/{path:path}"): "service:viewer",
    ("POST", "/services/{service_id}/{path:path}"): "service:viewer",
    ("PUT", "/services/{service_id}/{path:path}"): "service:viewer",
    ("PATCH", "/services/{service_id}/{path:path}"): "service:viewer",
    ("DELETE", "/services/{service_id}/{path:path}"): "service:viewer",
    # UI pages: the shell holds no data (the API calls it makes check the role), but needs sign-in
    ("GET", "/docs"): "signed-in",
    ("GET", "/docs/init.js"): "signed-in",
    ("GET", "/"): "signed-in",
    ("GET", "/experiments/{experiment_id}"): "signed-in",
    ("GET", "/compare"): "signed-in",
    ("GET", "/queue"): "signed-in",
    ("GET", "/services"): "signed-in",
    ("GET", "/alerts"): "signed-in",
    ("GET", "/sweep"): "signed-in",
    ("GET", "/groups"): "signed-in",
    ("GET", "/groups/{group_id}"): "signed-in",
    ("GET", "/models"): "signed-in",
    ("GET", "/models/{name}"): "signed-in",
    ("GET", "/datasets/{name}/versions/{version}"): "signed-in",
    ("GET", "/login"): "public",
    ("POST", "/login"): "public",
    ("GET", "/logout"): "public",
    ("POST", "/logout"): "public",
}

ROLE_IN_A = {"viewer_a": 1, "editor_a": 2, "admin_a": 3, "root": 3}
NEEDS = {"viewer": 1, "editor": 2, "admin": 3}
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}


def expected(rule: str, role: str) -> str:
    """'allowed', 'unauthorized' (401, or a redirect to /login for a page), 'forbidden' (403) or
    'hidden' (404: the caller is in none of the project's roles)."""
    if rule == "public":
        return "allowed"
    if role == "anonymous":
        return "unauthorized"
    if rule in ("signed-in", "body"):
        return "allowed"  # a body route checks what its body names: see the tests below
    if rule == "site:admin":
        return "allowed" if role == "root" else "forbidden"
    if rule == "any:editor":
        return "allowed" if role in ("editor_a", "admin_a", "admin_b", "root") else "forbidden"
    held = ROLE_IN_A.get(role)
    if held is None:
        return "hidden"
    return "allowed" if held >= NEEDS[rule.split(":")[1]] else "forbidden"


@pytest.fixture
def team(store: Store) -> Team:
    return make_team(store)


@pytest.fixture
def app(settings: ServerSettings, store: Store) -> FastAPI:
    return create_app(settings, store)


@pytest.fixture
def client(app: FastAPI, team: Team) -> Iterator[TestClient]:
    with TestClient(app, follow_redirects=False) as c:
        yield c


def test_every_route_declares_a_policy(app: FastAPI) -> None:
    undeclared = [(sorted(m), p) for m, p, rule in declared_routes(app) if rule is None]
    assert undeclared == []


def test_the_declared_policies_are_the_table(app: FastAPI) -> None:
    declared = {(m, p): rule for methods, p, rule in declared_routes(app) for m in methods if m != "HEAD"}
    assert declared == TABLE


def test_a_route_without_a_policy_is_refused_to_everybody(settings: ServerSettings, store: Store) -> None:
    app = create_app(settings, store)
    extra = APIRouter()

    @extra.get("/api/v1/forgotten")
    def forgotten() -> dict[str, bool]:
        return {"secret": True}

    @extra.get("/api/v1/declared")
    @policy("signed-in")
    def declared() -> dict[str, bool]:
        return {"ok": True}

    app.include_router(extra)
    with TestClient(app) as c:  # single-token mode, no token: everybody is all-powerful...
        assert c.get("/api/v1/declared").status_code == 200
        r = c.get("/api/v1/forgotten")  # ...but an undeclared route is nobody's
    assert r.status_code == 403 and "declares no access policy" in r.json()["message"]


def _fill(path: str, ids: dict[str, str]) -> str:
    values = {
        "experiment_id": ids["experiment"],
        "other_id": ids["experiment"],
        "group_id": ids["group"],
        "project": "A",
        "user": "spare",
        "title": "loss",
        "version": "1",
        "alias": "prod",
        "name": "x",
        "path": "x.txt",
        "hook_id": ids["hook"],
        "cluster": "x",
        "service_id": ids["service"],
    }
    return re.sub(r"\{(\w+)(:path)?\}", lambda m: values[m.group(1)], path)


def test_every_route_answers_each_role_as_the_table_says(
    client: TestClient, app: FastAPI, team: Team, store: Store, fake_boards: FakeBoard
) -> None:
    # mutations last (DELETE very last), so one role's reads see what it has not deleted yet
    # (and a service's stop after its own pages, whose DELETE is the service's, not its end; a
    # model's removal after its alias's and version's)
    last = ("/api/v1/services/{service_id}", "/api/v1/models/{name}")
    order = sorted(TABLE, key=lambda k: (k[0] in MUTATING, k[0] == "DELETE", k[1] in last, k[1]))
    wrong = []
    for role in ("anonymous", *ROLES):
        if "x" not in {m.name for m in registry_store(store).list_models()}:  # a role before removed it
            make_model(store, "x", fill.experiment(store, project="A").id, "A")
        ids = {
            "experiment": fill.experiment(store, project="A").id,
            "group": make_group(store, "A").id,
            "hook": alert_book(store).add_hook("A", "http://127.0.0.1:9/h", ["failed"], None, None).id,
            "service": fake_boards.add(app.state.services, store),
        }
        team.accounts.set_member("A", "spare", team.accounts.members("A").get("spare") or _viewer())
        headers = {} if role == "anonymous" else {"Authorization": f"Bearer {team.tokens[role]}"}
        for method, path in order:
            want = expected(TABLE[(method, path)], role)
            r = client.request(method, _fill(path, ids), headers=headers)
            text = r.text
            page = not path.startswith("/api/")
            if r.status_code >= 500:
                got = "error"
            elif TABLE[(method, path)] == "public" and r.status_code != 403:
                got = "allowed"  # the login form's own 401 for no password, logout's redirect
            elif r.status_code in (401,) or (
                page and r.status_code == 303 and "/login" in r.headers["location"]
            ):
                got = "unauthorized"
            elif r.status_code == 403:
                got = "forbidden"
            elif r.status_code == 404 and "not a member" in text:
                got = "hidden"
            else:
                got = "allowed"
            if got != want:
                wrong.append(f"{role}: {method} {path} -> {r.status_code} ({want} expected): {text[:150]}")
    assert wrong == [], "\n".join(wrong)


def _viewer() -> object:
    from phalanx.store.accounts import Role

    return Role.viewer


def test_a_viewer_gets_403_on_every_mutating_project_route() -> None:
    # but a board's: its viewers stop it (it changes nothing of the project's), and TensorBoard's own
    # POSTs through the proxy are reads of its data
    scoped = [k for k, rule in TABLE.items() if k[0] in MUTATING and ":" in rule and rule != "service:viewer"]
    assert scoped and all(expected(TABLE[k], "viewer_a") == "forbidden" for k in scoped)


def test_ingest_writes_only_projects_the_sender_edits(client: TestClient, team: Team, store: Store) -> None:
    a = fill.experiment(store, project="A", status=fill.ExperimentStatus.RUNNING)

    answers: list[str] = []

    def send(role: str, experiment_id: str, project: str | None = None) -> int:
        record: dict[str, object] = {"experiment_id": experiment_id, "stream": "x", "seq": 1, "time": 1.0}
        if project is None:
            record |= {"kind": "text", "data": {"title": "notes", "text": "hi"}}
        else:
            record |= {"kind": "experiment", "data": {"name": "script", "project": project}}
        r = client.post(
            "/api/v1/ingest",
            json={"events": [record]},
            headers={"Authorization": f"Bearer {team.tokens[role]}"},
        )
        answers.append(r.text)
        return r.status_code

    assert send("viewer_a", a.id) == 403
    assert send("admin_b", a.id) == 404
    assert send("editor_a", a.id) == 200
    assert send("editor_a", "newscript1", project="B") == 404  # not a member of B
    b_said = answers[-1]
    assert send("editor_a", "newscript1", project="Z") == 404  # no such project: the same words
    assert answers[-1] == b_said.replace("'B'", "'Z'")
    assert "does not exist or you are not a member of it (your projects: A;" in b_said, b_said
    assert send("viewer_a", "newscript2", project="A") == 403
    assert send("admin_b", "newscript3", project="B") == 200
    assert team.accounts.launched_by("experiment", "newscript3") == "admin_b"
    # a server admin sees every project, but creates none by a typo (as a submit does not)
    assert send("root", "newscript4", project="Bb") == 404
    assert "no project 'Bb' on this server; did you mean 'B'?" in answers[-1], answers[-1]
    assert "phalanx admin project add Bb" in answers[-1]
    assert all(e.project != "Bb" for e in store.list_experiments().items)
    assert send("root", "newscript5", project="B") == 200


def test_lists_show_only_the_callers_projects(client: TestClient, team: Team, store: Store) -> None:
    a = fill.experiment(store, project="A")
    b = fill.experiment(store, project="B")
    ga, gb = make_group(store, "A"), make_group(store, "B")

    def seen(role: str, path: str, key: str) -> set[str]:
        r = client.get(path, headers={"Authorization": f"Bearer {team.tokens[role]}"})
        assert r.status_code == 200, r.text
        body = r.json()
        items = body["items"] if isinstance(body, dict) else body
        return {item[key] for item in items}

    assert seen("viewer_a", "/api/v1/experiments", "id") == {a.id}
    assert seen("admin_b", "/api/v1/experiments?q=", "id") == {b.id}
    assert seen("none", "/api/v1/experiments", "id") == set()
    assert seen("root", "/api/v1/experiments", "id") == {a.id, b.id}
    assert seen("viewer_a", "/api/v1/groups", "id") == {ga.id}
    assert seen("admin_b", "/api/v1/groups", "id") == {gb.id}
    csv = client.get("/api/v1/experiments.csv", headers={"Authorization": f"Bearer {team.tokens['admin_b']}"})
    assert b.id in csv.text and a.id not in csv.text


def test_a_model_is_registered_only_from_an_experiment_the_caller_edits(
    client: TestClient, team: Team, store: Store
) -> None:
    a, b = fill.experiment(store, project="A"), fill.experiment(store, project="B")

    def register(role: str, experiment_id: str) -> tuple[int, str]:
        r = client.post(
            "/api/v1/models/m/versions",
            json={"experiment_id": experiment_id},
            headers={"Authorization": f"Bearer {team.tokens[role]}"},
        )
        return r.status_code, r.text

    status, text = register("editor_a", b.id)
    assert status == 404 and "not a member" in text
    status, text = register("editor_a", a.id)  # past the policy: the experiment saved no model
    assert status not in (401, 403) and "not a member" not in text
