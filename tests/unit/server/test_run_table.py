"""The run table: param and metric columns, sorted and filtered on the server across every page;
tags and notes editable; report_text readable."""

from __future__ import annotations

from fastapi.testclient import TestClient

from phalanx.domain import EventKind
from phalanx.store.base import Store
from tests.unit.server import fill


def _runs(store: Store, n: int = 7) -> list[str]:
    ids = []
    for i in range(n):
        e = fill.experiment(store, name=f"run{i}")
        fill.param(store, e.id, "Args", "lr", [0.1, 0.01, 0.001][i % 3])
        fill.scalars(store, e.id, "val/acc", "master", [0.1 * i, 0.5 + 0.05 * i, 0.2])
        ids.append(e.id)
    fill.experiment(store, name="no-metrics")  # sorts last, whatever the direction
    return ids


def test_columns_sort_across_every_page(client: TestClient, store: Store) -> None:
    ids = _runs(store)
    params = {
        "column": ["param:lr", "metric:max:val/acc", "metric:last:val/acc"],
        "order": "-metric:max:val/acc",
    }
    first = client.get("/api/v1/experiments", params={**params, "limit": 3}).json()
    second = client.get("/api/v1/experiments", params={**params, "limit": 3, "offset": 3}).json()
    assert first["total"] == 8
    order = [e["name"] for e in first["items"] + second["items"]]
    assert order == ["run6", "run5", "run4", "run3", "run2", "run1"]
    top = first["items"][0]["columns"]
    assert top == {"param:lr": 0.1, "metric:max:val/acc": 0.8, "metric:last:val/acc": 0.2}
    ascending = client.get("/api/v1/experiments", params={**params, "order": "metric:max:val/acc"}).json()
    assert [e["name"] for e in ascending["items"]][-1] == "no-metrics"
    assert ascending["items"][0]["id"] == ids[0]


def test_filters_by_a_column_across_every_page(client: TestClient, store: Store) -> None:
    _runs(store)
    r = client.get(
        "/api/v1/experiments",
        params={"where": ["param:lr=0.01", "metric:max:val/acc>=0.6"], "limit": 2, "column": "param:lr"},
    ).json()
    assert r["total"] == 1  # lr 0.01: run1 (max 0.55) and run4 (max 0.7); only run4 reaches 0.6
    assert [(e["name"], e["columns"]) for e in r["items"]] == [("run4", {"param:lr": 0.01})]
    low = client.get("/api/v1/experiments", params={"where": "metric:max:val/acc<0.6", "limit": 1}).json()
    assert low["total"] == 2 and len(low["items"]) == 1  # run0 (0.5) and run1 (0.55), paged after filtering
    bad = client.get("/api/v1/experiments", params={"where": "lr>1"})
    assert bad.status_code == 400 and "param:KEY" in bad.json()["message"]


def test_one_and_joined_where_is_the_same_as_repeated_wheres(client: TestClient, store: Store) -> None:
    """The UI's filter box sends what the user typed as one where=; the API reads it with the same
    grammar as repeated where= (it used to read "a=x and b<y" as a=("x and b<y"): 0 rows)."""
    _runs(store)
    repeated = client.get(
        "/api/v1/experiments", params={"where": ["param:lr=0.01", "metric:max:val/acc>=0.6"]}
    ).json()
    joined = client.get(
        "/api/v1/experiments", params={"where": "param:lr=0.01 and metric:max:val/acc>=0.6"}
    ).json()
    assert joined == repeated and joined["total"] == 1
    first_only = client.get("/api/v1/experiments", params={"where": "param:lr=0.01"}).json()
    assert first_only["total"] == 2  # the second condition does narrow it
    bad = client.get("/api/v1/experiments", params={"where": "param:lr=0.01 and acc>0.6"})
    assert bad.status_code == 400
    assert "position 19: unknown column 'acc'" in bad.json()["message"], bad.json()


def test_the_column_chooser_lists_keys_and_titles(client: TestClient, store: Store) -> None:
    _runs(store, 1)
    assert client.get("/api/v1/columns").json() == {"params": ["lr"], "metrics": ["val/acc"]}


def test_tags_and_notes_are_editable(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    r = client.patch(
        f"/api/v1/experiments/{e.id}", json={"tags": ["best", "baseline", "best"], "notes": "lr too high"}
    )
    assert r.status_code == 200
    assert r.json()["tags"] == ["best", "baseline"] and r.json()["notes"] == "lr too high"
    assert client.patch(f"/api/v1/experiments/{e.id}", json={"notes": ""}).json()["tags"] == [
        "best",
        "baseline",
    ]
    got = client.get(f"/api/v1/experiments/{e.id}").json()
    assert got["notes"] == "" and got["tags"] == ["best", "baseline"]
    assert client.get("/api/v1/experiments", params={"tag": "best"}).json()["total"] == 1
    cross = client.patch(
        f"/api/v1/experiments/{e.id}", json={"tags": []}, headers={"Origin": "http://evil.example"}
    )
    assert cross.status_code == 403


def test_report_text_is_readable(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    store.write_events(
        [fill.event(e.id, EventKind.TEXT, {"title": "summary", "text": "best acc 0.93", "step": 7})]
    )
    texts = client.get(f"/api/v1/experiments/{e.id}/texts").json()
    assert [(t["title"], t["text"], t["step"]) for t in texts] == [("summary", "best acc 0.93", 7)]
