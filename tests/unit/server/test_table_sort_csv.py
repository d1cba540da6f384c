"""Every run-table column sorts on the server (across pages, not the 50 rows on screen), and the
table exports as CSV with the same filters, order and extra columns."""

from __future__ import annotations

import csv
import io
import time

import pytest
from fastapi.testclient import TestClient

from phalanx.domain import ExperimentStatus
from phalanx.store.base import Store
from tests.unit.server import fill


def _runs(store: Store) -> dict[str, str]:
    """name -> id: durations 30, 10, 20 s; 3, 1, 2 workers; frameworks b, c, a."""
    ids = {}
    now = time.time()
    for name, took, workers, framework in [("r1", 30, 3, "b"), ("r2", 10, 1, "c"), ("r3", 20, 2, "a")]:
        e = store.create_experiment(
            name=name,
            project="examples",
            replicas=fill.replicas_for(workers),
            framework=framework,
            topology={"master": 1, "worker": workers},
        )
        store.update_experiment(
            e.id, status=ExperimentStatus.SUCCEEDED, started_at=now - 100, finished_at=now - 100 + took
        )
        fill.param(store, e.id, "Args", "lr", 0.0031839345902151214 * workers)
        ids[name] = e.id
    fill.experiment(store, name="waiting", n_workers=5, status=ExperimentStatus.CREATED)  # no duration: last
    return ids


def names(client: TestClient, sort: str, limit: int = 2) -> list[str]:
    out: list[str] = []
    for offset in (0, limit, 2 * limit):
        page = client.get("/api/v1/experiments", params={"sort": sort, "limit": limit, "offset": offset})
        assert page.status_code == 200, page.text
        out += [e["name"] for e in page.json()["items"]]
    return out


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        ("duration", ["r2", "r3", "r1", "waiting"]),
        ("-duration", ["r1", "r3", "r2", "waiting"]),
        ("topology", ["r2", "r3", "r1", "waiting"]),  # 2, 3, 4, 6 replicas
        ("-topology", ["waiting", "r1", "r3", "r2"]),
    ],
)
def test_computed_columns_sort_every_page(
    client: TestClient, store: Store, sort: str, expected: list[str]
) -> None:
    _runs(store)
    assert names(client, sort) == expected


def test_id_and_framework_sort_in_the_database(client: TestClient, store: Store) -> None:
    ids = _runs(store)
    assert names(client, "framework")[:3] == ["r3", "r1", "r2"]
    by_id = [n for n in names(client, "-id") if n in ids]
    assert by_id == sorted(ids, key=lambda n: ids[n], reverse=True)


def test_the_table_exports_as_csv_with_its_filters_order_and_columns(
    client: TestClient, store: Store
) -> None:
    ids = _runs(store)
    r = client.get(
        "/api/v1/experiments.csv",
        params={"column": "param:lr", "where": "param:lr>0.004", "sort": "-duration", "limit": 1},
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert [row["name"] for row in rows] == ["r1", "r3"]  # every match (not limit=1), longest first
    assert rows[0]["id"] == ids["r1"] and rows[0]["duration_s"] == "30.0"
    assert float(rows[0]["param:lr"]) == 0.0031839345902151214 * 3  # full precision
    assert rows[0]["topology"] == "master=1 worker=3"
    bad = client.get("/api/v1/experiments.csv", params={"where": "lr>1"})
    assert bad.status_code == 400
