"""The compact chart form (``format=compact``): the same series as the JSON form, in fewer bytes,
decoded back to the same steps and times and to values a chart cannot tell apart."""

from __future__ import annotations

import gzip
import json
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from phalanx.server.chartdata import chart_values, decode
from phalanx.store.base import Store
from tests.unit.server import fill


def both(client: TestClient, path: str, **params: object) -> tuple[dict, dict, int, int]:  # type: ignore[type-arg]
    """The JSON answer, the compact answer decoded, and the bytes each took on the wire."""
    full = client.get(path, params=params)
    compact = client.get(path, params={**params, "format": "compact"}, headers={"Accept-Encoding": "gzip"})
    assert full.status_code == compact.status_code == 200
    assert compact.headers["content-encoding"] == "gzip"
    wire = len(gzip.compress(compact.content))  # httpx already inflated it: measure it deflated again
    doc = compact.json()
    assert doc["format"] == "compact" and doc["title"] == full.json()["title"]
    return full.json(), decode(doc), len(full.content), wire


def test_compact_decodes_to_the_same_points_in_a_fraction_of_the_bytes(
    client: TestClient, store: Store
) -> None:
    e = fill.experiment(store)
    for w in range(8):
        values = [1.0 / (i + 1) + 0.37 * math.sin(i * 0.01 + w) * 1e-3 + w for i in range(3000)]
        values[100 + w] = math.nan
        fill.scalars(store, e.id, "loss", f"worker {w:02d}", values)
    path = f"/api/v1/experiments/{e.id}/metrics/loss"
    full, compact, full_bytes, wire = both(client, path, max_points=2000)
    assert compact.keys() == full["series"].keys()
    for name, s in full["series"].items():
        c = compact[name]
        assert c["steps"] == s["steps"] and c["count"] == s["count"]
        assert c["downsampled"] == s["downsampled"]
        assert len(c["times"]) == len(s["times"])
        assert all(abs(a - b) <= 0.0005 for a, b in zip(c["times"], s["times"], strict=True))
        assert c["times"][0] == s["times"][0]  # the first wall time exact
        for a, b in zip(c["values"], s["values"], strict=True):
            assert (a is None) == (b is None)
            if b is not None:
                assert abs(a - b) <= 5e-6 * abs(b)
    assert wire < full_bytes / 4, (wire, full_bytes)
    # a zoomed window, along wall time
    t = full["series"]["worker 00"]["times"]
    full, compact, _, _ = both(client, path, max_points=2000, x="time", x_min=t[50], x_max=t[200])
    assert compact["worker 03"]["steps"] == full["series"]["worker 03"]["steps"]


def test_a_value_that_moves_in_its_seventh_digit_keeps_its_shape() -> None:
    """6 significant digits would flatten 2.3025850 -> 2.3025851; a millionth of the range does not."""
    values = [2.302585 + i * 1e-9 for i in range(100)]
    rounded = [float(v or 0) for v in chart_values(values)]
    assert all(
        abs(a - b) <= 1e-15 + (max(values) - min(values)) * 1e-6 for a, b in zip(rounded, values, strict=True)
    )
    assert len(set(rounded)) == 100
    # and spanning decades (a log-scaled loss), every value keeps 6 digits of its own
    decades = [10.0 ** (-k / 10) for k in range(80)]
    kept = [float(v or 0) for v in chart_values(decades)]
    assert all(abs(a - b) <= 5e-6 * b for a, b in zip(kept, decades, strict=True))
    assert chart_values([math.inf, 1.0, 1.0]) == [None, 1.0, 1.0]


def test_without_gzip_the_compact_answer_is_plain_json(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    fill.scalars(store, e.id, "loss", "a", [float(i) for i in range(500)])
    r = client.get(
        f"/api/v1/experiments/{e.id}/metrics/loss",
        params={"format": "compact"},
        headers={"Accept-Encoding": "identity"},
    )
    assert "content-encoding" not in r.headers
    doc = json.loads(r.content)
    assert decode(doc)["a"]["steps"] == list(range(500))
    bad = client.get(f"/api/v1/experiments/{e.id}/metrics/loss", params={"format": "binary"})
    assert bad.status_code == 422 and "format" in bad.json()["message"]


def test_a_finished_experiments_chart_is_answered_again_from_the_cache(
    client: TestClient, store: Store
) -> None:
    from phalanx.domain import ExperimentStatus
    from phalanx.server.routes.metrics import chart_cache

    cache = chart_cache(client.app)
    done = fill.experiment(store)
    running = fill.experiment(store, status=ExperimentStatus.RUNNING)
    for e in (done, running):
        fill.scalars(store, e.id, "loss", "a", [1.0, 2.0])
    path = "/api/v1/experiments/{}/metrics/loss"
    first = client.get(path.format(done.id), params={"format": "compact"}).content
    fill.scalars(store, running.id, "loss", "a", [1.0, 2.0, 3.0])
    assert client.get(path.format(done.id), params={"format": "compact"}).content == first
    assert cache.hits == 1
    client.get(path.format(running.id), params={"format": "compact"})
    fill.scalars(store, running.id, "loss", "a", [1.0, 2.0, 3.0, 4.0])
    doc = client.get(path.format(running.id), params={"format": "compact"}).json()
    assert cache.hits == 1 and doc["series"]["a"]["count"] == 9  # a running one is read again (2 + 3 + 4)
    cache.ttl = -1.0  # an answer past its time is read again
    client.get(path.format(done.id), params={"max_points": 100})
    client.get(path.format(done.id), params={"max_points": 100})
    assert cache.hits == 1


def test_the_list_answers_while_every_chart_thread_is_busy(
    client: TestClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chart reads queue on their own pool: with its threads stuck on slow reads and more charts
    waiting, the experiment list and the other pages still answer."""
    from phalanx.server.routes import metrics

    e = fill.experiment(store)
    fill.scalars(store, e.id, "loss", "a", [1.0, 2.0])
    release = threading.Event()
    started = threading.Semaphore(0)
    slow_read = metrics._metric

    def stuck(*args: Any) -> Any:
        started.release()
        assert release.wait(60), "never released"
        return slow_read(*args)

    monkeypatch.setattr(metrics, "_metric", stuck)
    path = f"/api/v1/experiments/{e.id}/metrics/loss"
    with ThreadPoolExecutor(metrics.CHART_SLOTS + 2) as browsers:
        charts = [
            browsers.submit(client.get, path, params={"x_max": 10 + k})
            for k in range(metrics.CHART_SLOTS + 2)
        ]
        for _ in range(metrics.CHART_SLOTS):
            assert started.acquire(timeout=60)  # every chart thread is taken
        try:
            listed = client.get("/api/v1/experiments")
            assert listed.status_code == 200 and [x["id"] for x in listed.json()["items"]] == [e.id]
            assert client.get(f"/api/v1/experiments/{e.id}/metrics").status_code == 200
            assert not any(c.done() for c in charts)  # the charts were still waiting meanwhile
        finally:
            release.set()
        assert all(c.result(timeout=60).status_code == 200 for c in charts)
