"""One experiment's params cannot break a page: a value nested too deep or too big is refused at
ingest with a 400 naming it, and one stored before those bounds is shown as a note (every page
that lists it answers 200)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import insert

from phalanx.store.base import Store
from phalanx.store.paramshape import MAX_PARAM_BYTES, MAX_PARAM_DEPTH, depth
from phalanx.store.sql.models import ParamRow
from tests.unit.server import fill


def nested(levels: int) -> Any:
    v: Any = 1
    for _ in range(levels):
        v = {"x": v}
    return v


def record(exp: str, values: dict[str, Any], seq: int = 1) -> dict[str, Any]:
    data = {"section": "General", "values": values}
    return {"kind": "param", "experiment_id": exp, "data": data, "stream": "p", "seq": seq}


def test_a_900_deep_param_is_refused_naming_it_and_nothing_is_written(
    client: TestClient, store: Store
) -> None:
    e = fill.experiment(store)
    r = client.post("/api/v1/ingest", json={"events": [record(e.id, {"lr": 0.1, "deep": nested(900)})]})
    assert r.status_code == 400, r.text
    message = r.json()["message"]
    assert "events[0]" in message and "General/deep (data.values.deep)" in message, message
    assert f"more than {MAX_PARAM_DEPTH} levels" in message, message
    assert client.get(f"/api/v1/experiments/{e.id}/params").json() == []  # lr was not written either
    single = {"kind": "param", "experiment_id": e.id, "data": {"key": "big", "value": "x" * MAX_PARAM_BYTES}}
    r = client.post("/api/v1/ingest", json={"events": [single]})
    assert r.status_code == 400 and "General/big (data.value)" in r.json()["message"], r.text
    ok = client.post("/api/v1/ingest", json={"events": [record(e.id, {"tree": nested(MAX_PARAM_DEPTH)}, 2)]})
    assert ok.status_code == 200 and ok.json() == {"accepted": 1}  # up to the bound is fine


def test_a_deep_param_stored_before_the_bounds_breaks_no_page(client: TestClient, store: Store) -> None:
    e = fill.experiment(store, name="legacy")
    other = fill.experiment(store, name="other")
    fill.param(store, other.id, "General", "deep", 1)
    engine = store.engine  # type: ignore[attr-defined]
    with engine.begin() as conn:  # as an older server stored it, past today's ingest checks
        conn.execute(
            insert(ParamRow).values(
                experiment_id=e.id,
                section="General",
                key="deep",
                value=nested(900),
                replica="master",
                rank=0,
                time=1.0,
            )
        )
    for path, query in [
        (f"/api/v1/experiments/{e.id}/params", {}),
        ("/api/v1/experiments", {"column": "param:deep"}),
        ("/api/v1/experiments", {"column": "param:deep", "order": "-param:deep"}),
        ("/api/v1/experiments", {"column": "param:deep", "where": "param:deep!=1"}),
        (f"/api/v1/experiments/{e.id}/diff/{other.id}", {}),
        (f"/api/v1/experiments/{e.id}", {}),
    ]:
        r = client.get(path, params=query)
        assert r.status_code == 200, (path, query, r.text[:300])
    params = client.get(f"/api/v1/experiments/{e.id}/params").json()
    assert params[0]["value"].startswith("(not shown: nested more than")
    listed = client.get("/api/v1/experiments", params={"column": "param:deep", "order": "param:deep"}).json()
    cells = {i["name"]: i["columns"].get("param:deep") for i in listed["items"]}
    assert cells["other"] == 1 and str(cells["legacy"]).startswith("(not shown")


def test_depth_is_counted_without_recursion() -> None:
    assert depth(1) == 0 and depth([1]) == 1 and depth({"a": [1, {"b": 2}]}) == 3
    assert depth(nested(100_000)) == MAX_PARAM_DEPTH + 1  # stops early, no RecursionError
