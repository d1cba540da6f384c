"""What the envelope of a POSTed record may hold: its ``stream`` and ``replica`` end up in columns of
bounded length (stream 128, replica 64) that PostgreSQL enforces and SQLite does not, and
PostgreSQL cannot store a NUL in text. Such a record is a 400 naming the field on both stores,
never an internal error (500) on one of them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from phalanx.config import Settings
from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store import open_store
from tests.support import postgres
from tests.unit.server import fill


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def api(request: pytest.FixtureRequest, phalanx_home: Path) -> Iterator[tuple[TestClient, str]]:
    db_url = None
    if request.param == "postgresql":
        reason = postgres.unavailable_reason()
        if reason:
            pytest.skip(reason)
        db_url = postgres.shared_postgres().create_database()
    store_settings = Settings(home=phalanx_home, db_url=db_url) if db_url else Settings(home=phalanx_home)
    store = open_store(store_settings)
    e = fill.experiment(store)
    settings = ServerSettings(store=store_settings, allowed_hosts=["testserver"])
    with TestClient(create_app(settings, store)) as c:
        yield c, e.id
    store.close()


def _log(exp: str, **envelope: Any) -> dict[str, Any]:
    return {
        "experiment_id": exp,
        "kind": "log",
        "data": {"lines": ["hello"]},
        "stream": "s-1",
        "seq": 0,
        "time": time.time(),
        **envelope,
    }


@pytest.mark.parametrize(
    ("envelope", "field"),
    [
        ({"stream": "s" * 129}, "stream"),
        ({"stream": "a\x00b"}, "stream"),
        ({"replica": "r" * 65}, "replica"),
        ({"replica": "worker\x000"}, "replica"),
        ({"role": "w\x00"}, "role"),
    ],
)
def test_a_record_whose_envelope_no_store_can_hold_is_refused(
    api: tuple[TestClient, str], envelope: dict[str, Any], field: str
) -> None:
    client, exp = api
    r = client.post("/api/v1/ingest", json={"events": [_log(exp, **envelope)]})
    assert r.status_code == 400, r.text
    assert field in r.json()["message"]
    ok = client.post("/api/v1/ingest", json={"events": [_log(exp, seq=1)]})
    assert ok.status_code == 200 and ok.json() == {"accepted": 1}
