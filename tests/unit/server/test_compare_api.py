"""Compare in few requests: GET /compare?ids= (runs, params, titles) and GET /metrics/TITLE?ids=
(one title's points of every run, the same as each run's own compact chart answer); ids of other
projects are left out as if they did not exist."""

from __future__ import annotations

from fastapi.testclient import TestClient

from phalanx.server.chartdata import decode
from phalanx.store.base import Store
from tests.unit.server import fill
from tests.unit.server.teams_fixtures import make_team


def test_one_request_answers_runs_params_and_titles_and_names_the_missing(
    client: TestClient, store: Store
) -> None:
    a, b = fill.experiment(store, name="a"), fill.experiment(store, name="b")
    fill.param(store, a.id, "Declared", "lr", 0.1)
    fill.scalars(store, a.id, "loss", "master", [1.0, 0.5])
    fill.scalars(store, b.id, "system/cpu_percent", "master", [10.0])
    doc = client.get("/api/v1/compare", params={"ids": f"{a.id},{b.id[:8]},ffffffffffff,{a.id}"}).json()
    assert [e["id"] for e in doc["experiments"]] == [a.id, b.id] and doc["missing"] == ["ffffffffffff"]
    assert [(p["section"], p["key"], p["value"]) for p in doc["params"][a.id]] == [("Declared", "lr", 0.1)]
    assert doc["titles"] == {a.id: {"loss": ["master"]}, b.id: {"system/cpu_percent": ["master"]}}


def test_one_request_per_title_answers_every_runs_points_as_its_own_chart_does(
    client: TestClient, store: Store
) -> None:
    runs = [fill.experiment(store, name=f"r{i}") for i in range(3)]
    for i, e in enumerate(runs[:2]):
        fill.scalars(store, e.id, "loss", "master", [float(i + s) for s in range(50)])
    ids = ",".join(e.id for e in runs)
    got = client.get("/api/v1/metrics/loss", params={"ids": ids, "max_points": 20}).json()
    assert sorted(got["runs"]) == sorted(e.id for e in runs[:2])  # the run without it is left out
    for e in runs[:2]:
        own = client.get(
            f"/api/v1/experiments/{e.id}/metrics/loss", params={"max_points": 20, "format": "compact"}
        )
        assert decode(got["runs"][e.id]) == decode(own.json())
    zoomed = client.get("/api/v1/metrics/loss", params={"ids": ids, "x_min": 10, "x_max": 12}).json()
    assert decode(zoomed["runs"][runs[0].id])["master"]["steps"] == [10, 11, 12]
    assert client.get("/api/v1/metrics/loss", params={"ids": ids, "x_min": 5, "x_max": 1}).status_code == 400


def test_runs_of_projects_the_caller_is_not_in_are_left_out(client: TestClient, store: Store) -> None:
    team = make_team(store)
    mine, theirs = fill.experiment(store, project="A"), fill.experiment(store, project="B")
    fill.scalars(store, theirs.id, "loss", "master", [1.0])
    auth = {"Authorization": f"Bearer {team.tokens['viewer_a']}"}
    doc = client.get("/api/v1/compare", params={"ids": f"{mine.id},{theirs.id}"}, headers=auth).json()
    assert [e["id"] for e in doc["experiments"]] == [mine.id] and doc["missing"] == [theirs.id]
    points = client.get("/api/v1/metrics/loss", params={"ids": f"{mine.id},{theirs.id}"}, headers=auth).json()
    assert points["runs"] == {}
