from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine
from sqlalchemy.pool import StaticPool

from phalanx.domain import ExperimentStatus
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store.base import Store
from phalanx.store.sql.models import metadata
from tests.unit.server import fill


def test_list_shows_experiments_newest_first_with_topology_and_tags(client: TestClient, store: Store) -> None:
    a = fill.experiment(store, name="first", tags=["baseline"])
    b = fill.experiment(store, name="second", n_workers=3, n_ps=1)
    page = client.get("/api/v1/experiments").json()
    assert page["total"] == 2
    assert [e["id"] for e in page["items"]] == [b.id, a.id]
    assert page["items"][0]["topology"] == {"master": 1, "worker": 3, "ps": 1}
    assert page["items"][1]["tags"] == ["baseline"]


def test_list_filters_by_status_project_tag_and_text(client: TestClient, store: Store) -> None:
    ok = fill.experiment(store, name="mnist-ok", project="vision", tags=["fast"])
    bad = fill.experiment(store, name="mnist-bad", project="vision", status=ExperimentStatus.FAILED)
    other = fill.experiment(store, name="bert", project="nlp", tags=["fast"])

    def ids(**params: str) -> set[str]:
        return {e["id"] for e in client.get("/api/v1/experiments", params=params).json()["items"]}

    assert ids(status="failed") == {bad.id}
    assert ids(project="vision") == {ok.id, bad.id}
    assert ids(tag="fast") == {ok.id, other.id}
    assert ids(q="mnist") == {ok.id, bad.id}
    assert ids(q=other.id[:6]) == {other.id}


def test_list_pages_and_sorts(client: TestClient, store: Store) -> None:
    for name in ["c", "a", "b"]:
        fill.experiment(store, name=name)
    page = client.get("/api/v1/experiments", params={"limit": 2, "offset": 0, "sort": "name"}).json()
    assert [e["name"] for e in page["items"]] == ["a", "b"]
    assert page["total"] == 3
    page = client.get("/api/v1/experiments", params={"limit": 2, "offset": 2, "sort": "name"}).json()
    assert [e["name"] for e in page["items"]] == ["c"]


def test_bad_query_parameters_get_422_with_a_json_error(client: TestClient) -> None:
    for params in ({"status": "sleeping"}, {"limit": 0}, {"sort": "password"}, {"offset": -1}):
        r = client.get("/api/v1/experiments", params=params)
        assert r.status_code == 422, params
        assert r.json()["error"] == "invalid_request"


@pytest.mark.parametrize("path", ["/api/v1/experiments/{}", "/api/v1/groups/{}", "/api/v1/models/{}"])
def test_an_unknown_name_of_5000_characters_is_answered_cut_not_echoed(client: TestClient, path: str) -> None:
    r = client.get(path.format("a" * 5000))
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    message = r.json()["message"]
    assert len(message) < 400 and "a" * 200 not in message and "a" * 70 + "…(500" in message, message


def test_no_error_echoes_a_huge_input_whole(client: TestClient) -> None:
    spaced = client.get("/api/v1/experiments/" + ("a" * 150 + " ") * 33)  # words under 200 characters
    assert spaced.status_code == 404 and len(spaced.json()["message"]) < 1100
    host = client.get("/api/v1/experiments", headers={"Host": "h" * 5000})  # the middleware's own answer
    assert host.status_code == 400 and host.json()["error"] == "bad_host" and len(host.text) < 1200


def test_detail_accepts_a_unique_prefix_and_has_replicas_and_file(client: TestClient, store: Store) -> None:
    e = fill.experiment(store, n_workers=2, spec_text="version: 1\nkind: experiment\nframework: pytorch\n")
    doc = client.get(f"/api/v1/experiments/{e.id[:5]}").json()
    assert doc["id"] == e.id
    assert doc["spec_text"].startswith("version: 1")
    assert [r["name"] for r in doc["replicas"]] == ["master", "worker-0", "worker-1"]
    assert doc["replicas"][2]["rank"] == 2
    replicas = client.get(f"/api/v1/experiments/{e.id}/replicas").json()
    assert [r["role"] for r in replicas] == ["master", "worker", "worker"]


def test_unknown_experiment_is_404_with_code_and_message(client: TestClient) -> None:
    for path in ("", "/replicas", "/metrics", "/params", "/artifacts", "/models", "/logs"):
        r = client.get(f"/api/v1/experiments/0123456789ab{path}")
        assert r.status_code == 404, path
        body = r.json()
        assert body["error"] == "not_found" and "0123456789ab" in body["message"]


def test_delete_refuses_a_running_experiment_then_removes_a_finished_one(
    client: TestClient, store: Store
) -> None:
    e = fill.experiment(store, status=ExperimentStatus.RUNNING)
    r = client.delete(f"/api/v1/experiments/{e.id}")
    assert r.status_code == 409 and r.json()["error"] == "conflict"
    store.update_experiment(e.id, status=ExperimentStatus.STOPPED)
    assert client.delete(f"/api/v1/experiments/{e.id}").status_code == 204
    assert client.get(f"/api/v1/experiments/{e.id}").status_code == 404


def test_delete_needs_the_full_id_or_eight_characters_of_it(client: TestClient, store: Store) -> None:
    """`DELETE /experiments/a` deleted the only experiment whose id started with `a`."""
    e = fill.experiment(store, status=ExperimentStatus.SUCCEEDED)
    r = client.delete(f"/api/v1/experiments/{e.id[:1]}")
    assert r.status_code == 400 and r.json()["error"] == "usage"
    assert e.id in r.json()["message"] and "at least 8 characters" in r.json()["message"]
    assert client.delete(f"/api/v1/experiments/{e.id[:7]}").status_code == 400
    assert client.get(f"/api/v1/experiments/{e.id[:1]}").status_code == 200  # reading: any unique prefix
    assert client.delete(f"/api/v1/experiments/{e.id[:8]}").status_code == 204


def test_stop_leaves_a_request_and_stops_an_experiment_whose_supervisor_is_gone(
    client: TestClient, store: Store, phalanx_home: Path
) -> None:
    e = fill.experiment(store, status=ExperimentStatus.RUNNING)
    r = client.post(f"/api/v1/experiments/{e.id}/stop")
    assert r.status_code == 200
    assert r.json()["stop_requested"] is True
    assert (phalanx_home / "runs" / e.id / "stop").is_file()
    assert r.json()["status"] == "stopped"
    assert store.get_experiment(e.id).status is ExperimentStatus.STOPPED


def test_stop_of_a_finished_experiment_changes_nothing(
    client: TestClient, store: Store, phalanx_home: Path
) -> None:
    e = fill.experiment(store, status=ExperimentStatus.SUCCEEDED)
    r = client.post(f"/api/v1/experiments/{e.id}/stop").json()
    assert r["stop_requested"] is False and r["status"] == "succeeded"
    assert not (phalanx_home / "runs" / e.id / "stop").exists()


def test_an_unexpected_failure_is_a_json_500_without_a_traceback(
    settings: ServerSettings, store: Store
) -> None:
    # the users' tables answer (none yet; one in-memory database for every thread); every read fails
    tables = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    metadata.create_all(tables)

    class Broken:
        artifact_store = None
        engine = tables

        def __getattr__(self, name: str) -> Any:
            def fail(*args: Any, **kwargs: Any) -> None:
                raise RuntimeError("database is on fire")

            return fail

    with TestClient(create_app(settings, Broken()), raise_server_exceptions=False) as c:  # type: ignore[arg-type]
        r = c.get("/api/v1/experiments")
    assert r.status_code == 500
    assert r.json() == {
        "error": "error",
        "message": "internal error (RuntimeError); the server log has the details",
    }
