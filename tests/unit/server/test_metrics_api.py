import math

from fastapi.testclient import TestClient

from phalanx.store.base import Store
from tests.unit.server import fill


def test_titles_list_every_series(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    for w in range(2):
        fill.scalars(store, e.id, "loss", f"worker {w:02d}", [1.0, 0.5], replica=f"worker-{w}")
    fill.scalars(store, e.id, "train/acc", "master", [0.1])
    doc = client.get(f"/api/v1/experiments/{e.id}/metrics").json()
    assert doc == {"titles": {"loss": ["worker 00", "worker 01"], "train/acc": ["master"]}}


def test_a_short_series_comes_back_exact(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    fill.scalars(store, e.id, "loss", "worker 00", [3.0, 2.0, 1.5])
    doc = client.get(f"/api/v1/experiments/{e.id}/metrics/loss", params={"max_points": 100}).json()
    s = doc["series"]["worker 00"]
    assert s["steps"] == [0, 1, 2] and s["values"] == [3.0, 2.0, 1.5]
    assert s["count"] == 3 and s["downsampled"] is False
    assert len(s["times"]) == 3


def test_max_points_downsamples_and_keeps_the_spike(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    values = [1.0 / (i + 1) for i in range(20_000)]
    values[12_345] = 99.0
    fill.scalars(store, e.id, "loss", "worker 00", values)
    s = client.get(f"/api/v1/experiments/{e.id}/metrics/loss", params={"max_points": 500}).json()["series"][
        "worker 00"
    ]
    assert len(s["values"]) <= 500
    assert s["count"] == 20_000 and s["downsampled"] is True
    assert 99.0 in s["values"] and 12_345 in s["steps"]
    assert s["steps"][0] == 0 and s["steps"][-1] == 19_999


def test_x_time_buckets_along_wall_time(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    fill.scalars(store, e.id, "loss", "a", [float(i % 10) for i in range(1000)])
    doc = client.get(
        f"/api/v1/experiments/{e.id}/metrics/loss", params={"max_points": 50, "x": "time"}
    ).json()
    s = doc["series"]["a"]
    assert doc["x"] == "time" and len(s["times"]) <= 50
    assert s["times"] == sorted(s["times"])


def test_titles_with_slashes_and_a_single_series_filter(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    fill.scalars(store, e.id, "train/loss", "a", [1.0])
    fill.scalars(store, e.id, "train/loss", "b", [2.0])
    doc = client.get(f"/api/v1/experiments/{e.id}/metrics/train/loss", params={"series": "b"}).json()
    assert list(doc["series"]) == ["b"]


def test_non_finite_values_are_sent_as_null(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    fill.scalars(store, e.id, "loss", "a", [1.0, -math.inf, math.inf])
    r = client.get(f"/api/v1/experiments/{e.id}/metrics/loss")
    assert r.status_code == 200
    assert r.json()["series"]["a"]["values"] == [1.0, None, None]


def test_an_unknown_title_is_404(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    r = client.get(f"/api/v1/experiments/{e.id}/metrics/nope")
    assert r.status_code == 404 and "nope" in r.json()["message"]


def test_a_zoomed_range_comes_back_in_full_detail(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    fill.scalars(store, e.id, "loss", "a", [float(i) for i in range(50_000)])
    params: dict[str, str | int] = {"max_points": 1000, "x_min": 20_000, "x_max": 20_499}
    s = client.get(f"/api/v1/experiments/{e.id}/metrics/loss", params=params).json()["series"]["a"]
    assert s["steps"] == list(range(20_000, 20_500))
    assert s["count"] == 50_000


def test_an_unknown_series_is_404_naming_the_series_there_are(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    fill.scalars(store, e.id, "loss", "worker 00", [1.0])
    r = client.get(f"/api/v1/experiments/{e.id}/metrics/loss", params={"series": "worker 09"})
    assert r.status_code == 404
    assert "'worker 09'" in r.json()["message"] and "worker 00" in r.json()["message"]


def test_a_range_that_is_empty_or_not_finite_is_400(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    fill.scalars(store, e.id, "loss", "worker 00", [1.0, 2.0])
    for params in ({"x_min": 10, "x_max": 1}, {"x_min": "nan"}, {"x_max": "inf"}, {"x_min": "-inf"}):
        r = client.get(f"/api/v1/experiments/{e.id}/metrics/loss", params=params)
        assert r.status_code == 400, (params, r.text)
        assert r.json()["error"] == "usage"
