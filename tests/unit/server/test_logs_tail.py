"""Reading a console from its end (from_end): the last lines first, then the pages before them."""

from __future__ import annotations

from fastapi.testclient import TestClient

from phalanx.store.base import Store
from tests.unit.server import fill


def test_from_end_reads_the_last_lines_then_pages_backwards(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    fill.log_lines(store, e.id, "master", [f"m{i}" for i in range(25)])
    fill.log_lines(store, e.id, "worker-0", [f"w{i}" for i in range(5)])
    url = f"/api/v1/experiments/{e.id}/logs"
    every = [line["text"] for line in client.get(url, params={"limit": 100}).json()["lines"]]
    last = client.get(url, params={"from_end": "true", "limit": 10}).json()
    assert [line["text"] for line in last["lines"]] == every[-10:] and last["next_offset"] == 10
    before = client.get(url, params={"from_end": "true", "limit": 10, "offset": 10}).json()
    assert [line["text"] for line in before["lines"]] == every[-20:-10]
    start = client.get(url, params={"from_end": "true", "limit": 10, "offset": 20}).json()
    assert [line["text"] for line in start["lines"]] == every[:10]
    assert client.get(url, params={"from_end": "true", "offset": 30}).json()["lines"] == []
    one = client.get(url, params={"from_end": "true", "limit": 3, "replica": "master"}).json()
    assert [(line["text"], line["offset"]) for line in one["lines"]] == [
        ("m22", 22),
        ("m23", 23),
        ("m24", 24),
    ]
