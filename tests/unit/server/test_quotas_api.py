"""Project quotas over HTTP, the queue route saying why a run waits under them, and a submit beyond
the project's max-waiting answered 429 before anything starts."""

from __future__ import annotations

import os

from fastapi.testclient import TestClient

from phalanx.machine.ledger import Capacity, Need
from phalanx.queue import ledger_for
from phalanx.server.settings import ServerSettings
from phalanx.share import Limit
from phalanx.store.base import Store

HUGE = Capacity(cpus=tuple(range(4096)), gpus=(), memory_mib=1e9)


def test_a_quota_is_set_read_listed_and_removed(client: TestClient) -> None:
    url = "/api/v1/projects/vision/quota"
    assert client.get(url).json() == {
        "project": "vision",
        "target": "local",
        "set": False,
        "cores": None,
        "gpus": None,
        "memory_mib": None,
        "max_waiting": None,
    }
    r = client.put(url, json={"cores": 8, "memory": "8Gi", "max_waiting": 20})
    assert r.status_code == 200, r.text
    assert r.json()["memory_mib"] == 8192 and r.json()["set"] is True
    got = client.get(url).json()
    assert (got["cores"], got["gpus"], got["max_waiting"]) == (8, None, 20)
    # a PUT replaces the whole quota: what it leaves out is no limit
    assert client.put(url, json={"gpus": 1}).json()["cores"] is None
    assert [q["project"] for q in client.get("/api/v1/quotas").json()] == ["vision"]
    assert client.delete(url).status_code == 204
    assert client.delete(url).status_code == 404
    assert client.get("/api/v1/quotas").json() == []


def test_mistakes_are_refused_and_name_the_field(client: TestClient) -> None:
    url = "/api/v1/projects/vision/quota"
    for body, status, words in (
        ({"cores": -1}, 422, "body.cores"),
        ({"max_waiting": 10**12}, 422, "body.max_waiting"),
        ({"memory": "8 bananas"}, 400, "memory:"),
        ({"memory": 1e300}, 400, "larger than any machine"),
        ({}, 400, "give at least one of cores"),
        ({"cores": 1, "target": "no spaces"}, 400, "target 'no spaces'"),
    ):
        r = client.put(url, json=body)
        assert r.status_code == status, (body, r.text)
        assert words in r.json()["message"], (body, r.json())
    assert client.get("/api/v1/quotas").json() == []


def test_the_queue_says_a_run_waits_for_its_projects_quota(
    client: TestClient, settings: ServerSettings
) -> None:
    client.put("/api/v1/projects/vision/quota", json={"cores": 8})
    ledger = ledger_for(settings.store)
    me = os.getpid()
    limits = {"vision": Limit(cores=8)}
    assert ledger.admit("v1", Need(cpus=8), HUGE, pid=me, project="vision", limits=limits)[0] is not None
    assert ledger.admit("v2", Need(cpus=4), HUGE, pid=me, project="vision", limits=limits)[0] is None
    doc = client.get("/api/v1/queue").json()
    (row,) = doc["queued"]
    assert row["project"] == "vision"
    assert row["why"] == "project vision at its 8-core quota"
    vision = next(p for p in doc["projects"] if p["project"] == "vision")
    assert vision["quota"]["cores"] == 8 and vision["holds"]["cpus"] == 8 and vision["waiting"] == 1


def test_a_submit_beyond_max_waiting_is_429_and_starts_nothing(
    client: TestClient, settings: ServerSettings, store: Store
) -> None:
    client.put("/api/v1/projects/vision/quota", json={"cores": 1, "max_waiting": 1})
    ledger = ledger_for(settings.store)
    me = os.getpid()
    ledger.admit("v1", Need(cpus=4096), HUGE, pid=me, project="vision")
    ledger.admit("v2", Need(cpus=1), HUGE, pid=me, project="vision")
    text = "version: 1\nkind: experiment\nproject: vision\nrun:\n  cmd: python -c pass\n"
    r = client.post(
        "/api/v1/experiments",
        data={"file_name": "exp.yml", "file_text": text},
        files={"bundle": ("code.tar.gz", b"not even read", "application/gzip")},
    )
    assert r.status_code == 429, r.text
    assert r.json()["error"] == "quota_exceeded"
    assert "project vision already has 1 experiment waiting" in r.json()["message"]
    assert "phalanx quota set vision --max-waiting" in r.json()["message"]
    assert store.list_experiments().total == 0
