"""GET /api/v1/sweep: the sweep analysis of a set of runs (the table's filters or a selection)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from phalanx.store.base import Store
from tests.unit.server import fill


def test_a_filtered_set_and_a_selection_give_their_runs_varying_params_and_metric(
    client: TestClient, store: Store
) -> None:
    ids = []
    for i, (opt, lr, acc) in enumerate([("adam", 0.1, 0.9), ("sgd", 0.01, 0.5), ("adam", 0.001, 0.7)]):
        e = fill.experiment(store, name=f"r{i}", project="sweep")
        fill.param(store, e.id, "Args", "optimizer", opt)
        fill.param(store, e.id, "Args", "lr", lr)
        fill.param(store, e.id, "Args", "seed", 1)  # the same everywhere: no axis
        fill.scalars(store, e.id, "acc", "master", [acc / 2, acc])
        ids.append(e.id)
    doc = client.get(
        "/api/v1/sweep", params={"metric": "metric:max:acc", "where": "param:optimizer=adam"}
    ).json()
    assert sorted(r["id"] for r in doc["runs"]) == sorted([ids[0], ids[2]])
    assert doc["params"] == ["lr"]  # optimizer is adam in both, seed everywhere 1
    assert sorted(r["value"] for r in doc["runs"]) == [0.7, 0.9]
    assert "η²" in doc["importance"]["method"]

    picked = client.get(
        "/api/v1/sweep", params={"metric": "metric:max:acc", "ids": f"{ids[1]},{ids[0]},nosuchrun"}
    ).json()
    assert [r["id"] for r in picked["runs"]] == [ids[1], ids[0]]  # in the order given
    assert picked["params"] == ["lr", "optimizer"] and picked["missing"] == ["nosuchrun"]
    assert picked["runs"][0]["params"] == {"lr": 0.01, "optimizer": "sgd"}


def test_a_metric_that_is_not_a_metric_column_is_a_400_saying_the_form(client: TestClient) -> None:
    r = client.get("/api/v1/sweep", params={"metric": "param:lr"})
    assert r.status_code == 400 and "metric:AGG:TITLE" in r.json()["message"]
