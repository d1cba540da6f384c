"""A plain script's ``repro`` record (what it ran) reaches the store through ingest; what a
supervised experiment ran is its supervisor's to record: a ``repro`` record for it is refused (409)
and changes nothing, like a ``status`` record."""

from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient

from phalanx.store.base import Store
from tests.unit.server import fill

RECORD = {"git": {"commit": "abc", "diff": "+x"}, "packages": ["a==1"], "snapshot": {"files": 1}}


def _events(exp: str, *kinds: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    envelope = {"stream": f"s-{exp}", "experiment_id": exp, "time": time.time()}
    return {"events": [{**envelope, "seq": i, "kind": k, "data": d} for i, (k, d) in enumerate(kinds)]}


def test_a_plain_scripts_repro_record_is_stored(client: TestClient, store: Store) -> None:
    created = ("experiment", {"name": "plain", "project": "p", "pid": 0, "host": "h"})
    repro = ("repro", {"name": "source", "path": "_source/source.tar.gz", "record": RECORD})
    r = client.post("/api/v1/ingest", json=_events("plain1", created, repro))
    assert r.status_code == 200, r.text
    got = store.repro("plain1")
    assert got["git"] == RECORD["git"] and got["packages"] == ["a==1"]
    assert got["snapshot"] == {"files": 1, "path": "_source/source.tar.gz"}


def test_a_repro_record_cannot_rewrite_what_a_supervised_experiment_ran(
    client: TestClient, store: Store
) -> None:
    e = fill.experiment(store)
    store.set_repro(e.id, {"git": {"commit": "real"}})
    forged = (
        "repro",
        {"name": "source", "path": "_source/source.tar.gz", "record": {"git": {"commit": "x"}}},
    )
    r = client.post("/api/v1/ingest", json=_events(e.id, forged))
    assert r.status_code == 409 and r.json()["error"] == "conflict", r.text
    assert store.repro(e.id)["git"] == {"commit": "real"}


def test_a_repro_record_without_its_record_is_a_400(client: TestClient, store: Store) -> None:
    created = ("experiment", {"name": "plain", "project": "p", "pid": 0, "host": "h"})
    bad = ("repro", {"name": "source", "path": "_source/source.tar.gz", "record": "not an object"})
    r = client.post("/api/v1/ingest", json=_events("plain2", created, bad))
    assert r.status_code == 400 and "'record'" in r.text, r.text
