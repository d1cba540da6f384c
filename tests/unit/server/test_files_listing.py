"""GET /api/v1/experiments/{id}/files: every file stored for an experiment, as the paths
GET .../files/{path} serves (what a server run's ``get_file_names()`` lists); its project's viewers
read it, an outsider gets 404."""

from __future__ import annotations

from fastapi.testclient import TestClient

from phalanx.store.base import Store
from tests.unit.server import fill
from tests.unit.server.teams_fixtures import make_team


def test_the_files_of_an_experiment_are_listed_and_served(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    assert client.get(f"/api/v1/experiments/{e.id}/files").json() == []
    assert store.artifact_store is not None
    store.artifact_store.put_bytes(e.id, "models/tiny.onnx", b"onnx")
    store.artifact_store.put_bytes(e.id, "artifacts/notes.txt", b"notes")
    r = client.get(f"/api/v1/experiments/{e.id[:6]}/files")
    assert r.status_code == 200 and r.json() == ["artifacts/notes.txt", "models/tiny.onnx"]
    assert r.json() == store.artifact_store.list(e.id)  # what the local Run.get_file_names lists
    assert client.get(f"/api/v1/experiments/{e.id}/files/artifacts/notes.txt").content == b"notes"
    assert client.get("/api/v1/experiments/ffffffffffff/files").status_code == 404


def test_only_the_projects_viewers_list_its_files(client: TestClient, store: Store) -> None:
    team = make_team(store)
    e = fill.experiment(store, project="A")

    def listed(role: str) -> int:
        headers = {"Authorization": f"Bearer {team.tokens[role]}"}
        return client.get(f"/api/v1/experiments/{e.id}/files", headers=headers).status_code

    assert listed("viewer_a") == 200 and listed("root") == 200
    assert listed("admin_b") == 404 and listed("none") == 404
