"""The API over PostgreSQL (PHALANX_DB_URL): the same answers as over SQLite, against a real server
that the tests start."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.support import postgres
from tests.unit.server import fill

from phalanx.config import Settings
from phalanx.domain import ExperimentStatus
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store import open_store
from phalanx.store.base import Store

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg(phalanx_home: Path) -> Iterator[tuple[TestClient, Store]]:
    reason = postgres.unavailable_reason()
    if reason:
        pytest.skip(reason)
    settings = Settings(home=phalanx_home, db_url=postgres.shared_postgres().create_database())
    store = open_store(settings)
    with TestClient(
        create_app(ServerSettings(store=settings, poll_seconds=0.05, allowed_hosts=["testserver"]), store)
    ) as client:
        yield client, store
    store.close()


def test_the_api_answers_the_same_over_postgresql(pg: tuple[TestClient, Store]) -> None:
    client, store = pg
    e = fill.experiment(store, name="on-pg", tags=["pg"], status=ExperimentStatus.SUCCEEDED)
    fill.scalars(store, e.id, "loss", "worker 00", [1.0 / (i + 1) for i in range(5000)])
    fill.param(store, e.id, "General", "worker_1_stuff", "x", replica="worker-0")
    fill.log_lines(store, e.id, "worker-0", ["hello from rank 1"])
    assert [
        x["id"] for x in client.get("/api/v1/experiments", params={"tag": "pg", "q": "on-"}).json()["items"]
    ] == [e.id]
    s = client.get(f"/api/v1/experiments/{e.id[:4]}/metrics/loss", params={"max_points": 100}).json()[
        "series"
    ]
    assert s["worker 00"]["count"] == 5000 and len(s["worker 00"]["values"]) <= 100
    assert client.get(f"/api/v1/experiments/{e.id}/params").json()[0]["replica"] == "worker-0"
    with client.stream("GET", f"/api/v1/experiments/{e.id}/logs/stream") as r:
        body = r.read().decode()
    assert "hello from rank 1" in body and "event: end" in body
    batch = {
        "events": [
            {
                "stream": "s",
                "seq": i,
                "kind": "scalar",
                "experiment_id": e.id,
                "replica": "master",
                "data": {"title": "acc", "series": "m", "value": 0.5, "iteration": i},
            }
            for i in range(10)
        ]
    }
    assert client.post("/api/v1/ingest", json=batch).json() == {"accepted": 10}
    assert client.post("/api/v1/ingest", json=batch).json() == {"accepted": 0}
    assert client.delete(f"/api/v1/experiments/{e.id}").status_code == 204
