"""The model registry on a team server: a model belongs to the project of the experiment it was
first registered from; that project's viewers read it (files too), its editors change it, lists
show only the caller's projects' models, and an outsider gets 404 as if it did not exist. In
single-token mode everybody still reads and writes every model."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from phalanx.registry.checker import Checked, check_in_process
from phalanx.server.deps import get_model_checker
from phalanx.services.targets import Target
from phalanx.store.base import Store
from tests.unit.server import fill
from tests.unit.server.fake_services import FakeBoard
from tests.unit.server.teams_fixtures import Team, make_model, make_team


@pytest.fixture
def team(store: Store) -> Team:
    return make_team(store)


@pytest.fixture
def models(store: Store) -> None:
    make_model(store, "ma", fill.experiment(store, project="A").id, "A")
    make_model(store, "mb", fill.experiment(store, project="B").id, "B")


def _as(team: Team, role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {team.tokens[role]}"}


def _hidden(r: httpx.Response) -> bool:
    return r.status_code == 404 and "not a member" in r.text


@pytest.mark.usefixtures("models")
def test_lists_show_only_the_callers_projects_models(client: TestClient, team: Team) -> None:
    def listed(role: str) -> dict[str, str]:
        r = client.get("/api/v1/models", headers=_as(team, role))
        assert r.status_code == 200, r.text
        return {m["name"]: m["project"] for m in r.json()}

    assert listed("viewer_a") == {"ma": "A"}
    assert listed("editor_a") == {"ma": "A"}
    assert listed("admin_b") == {"mb": "B"}
    assert listed("none") == {}
    assert listed("root") == {"ma": "A", "mb": "B"}


@pytest.mark.usefixtures("models")
@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/models/ma",
        "/api/v1/models/ma/versions/1",
        "/api/v1/models/ma/versions/1/file",
    ],
)
def test_a_models_viewers_read_it_and_outsiders_get_404(client: TestClient, team: Team, path: str) -> None:
    for role in ("viewer_a", "editor_a", "admin_a", "root"):
        r = client.get(path, headers=_as(team, role))
        assert r.status_code == 200, (role, r.text)
    assert client.get(path, headers=_as(team, "viewer_a")).content != b""
    for role in ("none", "admin_b"):
        assert _hidden(client.get(path, headers=_as(team, role))), role
        # a name no model has is told in the same words: no probing which names another project uses
        nothing = client.get(path.replace("/ma", "/nothing"), headers=_as(team, role))
        assert nothing.json()["message"] == client.get(path, headers=_as(team, role)).json()[
            "message"
        ].replace("model ma", "model nothing"), nothing.text


@pytest.mark.usefixtures("models")
def test_a_models_editors_change_it_viewers_may_not(client: TestClient, team: Team) -> None:
    writes = [
        ("PUT", "/api/v1/models/ma/aliases/prod", {"version": 1}, 200),
        ("PATCH", "/api/v1/models/ma", {"description": "digits"}, 200),
        ("PATCH", "/api/v1/models/ma/versions/1", {"tags": {"k": "v"}}, 200),
        ("DELETE", "/api/v1/models/ma/aliases/prod", None, 204),
    ]
    for method, path, body, ok in writes:
        r = client.request(method, path, json=body, headers=_as(team, "viewer_a"))
        assert r.status_code == 403 and "needs editor" in r.text, (method, path, r.text)
        assert _hidden(client.request(method, path, json=body, headers=_as(team, "admin_b"))), path
        r = client.request(method, path, json=body, headers=_as(team, "editor_a"))
        assert r.status_code == ok, (method, path, r.text)
    r = client.get("/api/v1/models/ma", headers=_as(team, "viewer_a"))
    assert r.json()["description"] == "digits" and r.json()["versions"][0]["tags"] == {"k": "v"}


@pytest.mark.usefixtures("models")
def test_a_new_version_needs_an_editor_of_the_models_project(
    client: TestClient, team: Team, store: Store
) -> None:
    b = fill.experiment(store, project="B")

    def register(role: str, name: str, experiment_id: str) -> tuple[int, str]:
        r = client.post(
            f"/api/v1/models/{name}/versions", json={"experiment_id": experiment_id}, headers=_as(team, role)
        )
        return r.status_code, r.text

    status, text = register("admin_b", "ma", b.id)  # edits B, but model ma is A's
    assert status == 404 and "model ma" in text and "not a member" in text
    status, text = register("admin_b", "mb", b.id)  # past every policy: b saved no model
    assert status not in (401, 403) and "not a member" not in text


def test_a_new_name_belongs_to_its_experiments_project(client: TestClient, team: Team, store: Store) -> None:
    pytest.importorskip("onnxruntime")
    from tests.support.onnx_models import random_linear, record_model

    b = store.create_experiment(name="train", project="B").id
    record_model(store, b, "digits", random_linear(1))
    r = client.post("/api/v1/models/fresh/versions", json={"experiment_id": b}, headers=_as(team, "admin_b"))
    assert r.status_code == 201, r.text
    assert _hidden(client.get("/api/v1/models/fresh", headers=_as(team, "admin_a")))
    assert client.get("/api/v1/models/fresh", headers=_as(team, "admin_b")).json()["project"] == "B"


def test_a_name_another_project_registers_while_the_check_runs_gets_no_version_from_outside(
    client: TestClient, team: Team, store: Store
) -> None:
    # B's admin registers a new name; while its check runs (minutes, for a large model, in a process
    # of its own), A registers the same name: A's model, which B's version must not join
    pytest.importorskip("onnxruntime")
    from tests.support.onnx_models import random_linear, record_model

    b = store.create_experiment(name="train", project="B").id
    record_model(store, b, "digits", random_linear(1))

    def checked_while_a_registers(
        data: bytes, metadata: dict[str, Any], project: str, where: str, stop: threading.Event | None = None
    ) -> Checked:
        make_model(store, "raced", fill.experiment(store, project="A").id, "A")
        return check_in_process(data, metadata, project, where, stop)

    client.app.dependency_overrides[get_model_checker] = lambda: checked_while_a_registers  # type: ignore[attr-defined]
    r = client.post("/api/v1/models/raced/versions", json={"experiment_id": b}, headers=_as(team, "admin_b"))
    assert _hidden(r) and "model raced" in r.text, r.text
    model = client.get("/api/v1/models/raced", headers=_as(team, "admin_a")).json()
    assert model["project"] == "A"
    assert [v["version"] for v in model["versions"]] == [1]  # A's own, nothing of B's experiment
    assert model["versions"][0]["experiment_id"] != b


@pytest.mark.usefixtures("models")
def test_single_token_mode_reads_and_writes_every_model(client: TestClient) -> None:
    assert {m["name"] for m in client.get("/api/v1/models").json()} == {"ma", "mb"}
    assert client.get("/api/v1/models/mb/versions/1/file").status_code == 200
    assert client.put("/api/v1/models/ma/aliases/prod", json={"version": 1}).status_code == 200
    r = client.get("/api/v1/models/nothing")  # the registry's own message, as before
    assert r.status_code == 404 and "phalanx models register" in r.text


@pytest.mark.usefixtures("models")
@pytest.mark.parametrize("path", ["/api/v1/models/ma/versions/1", "/api/v1/models/ma"])
def test_a_models_editors_remove_it_viewers_may_not_and_outsiders_get_404(
    client: TestClient, team: Team, path: str
) -> None:
    r = client.delete(path, headers=_as(team, "viewer_a"))
    assert r.status_code == 403 and "needs editor" in r.text, r.text
    for role in ("none", "admin_b"):
        assert _hidden(client.delete(path, headers=_as(team, role))), role
    assert client.get("/api/v1/models/ma/versions/1", headers=_as(team, "viewer_a")).status_code == 200
    r = client.delete(path, headers=_as(team, "editor_a"))
    assert r.status_code == 200, r.text
    assert [(v["name"], v["version"]) for v in r.json()] == [("ma", 1)]
    assert client.get("/api/v1/models/ma/versions/1", headers=_as(team, "viewer_a")).status_code == 404
    assert [m["name"] for m in client.get("/api/v1/models", headers=_as(team, "root")).json()] == (
        ["ma", "mb"] if path.endswith("/1") else ["mb"]
    )
    r = client.delete("/api/v1/models/ma/versions/7", headers=_as(team, "editor_a"))
    assert r.status_code == 404, r.text


@pytest.mark.usefixtures("models")
def test_a_served_version_is_not_removed(
    client: TestClient, team: Team, store: Store, fake_boards: FakeBoard
) -> None:
    from phalanx.registry.service import Registry
    from phalanx.serving.folder import publish

    registry = Registry(store)
    service = replace(fake_boards.make(store, "A", Target("model", "ma@prod")), kind="model")
    version = registry.resolve("ma@1")
    publish(service.folder / "model", version, registry.read_bytes(version))
    client.app.state.services.add(service)  # type: ignore[attr-defined]
    for path in ("/api/v1/models/ma/versions/1", "/api/v1/models/ma"):
        r = client.delete(path, headers=_as(team, "editor_a"))
        assert r.status_code == 409, r.text
        assert f"version 1 by service {service.id}" in r.text and "stop the service" in r.text
    assert client.get("/api/v1/models/ma/versions/1", headers=_as(team, "viewer_a")).status_code == 200
    client.app.state.services.stop(service.id)  # type: ignore[attr-defined]
    assert client.delete("/api/v1/models/ma", headers=_as(team, "editor_a")).status_code == 200
