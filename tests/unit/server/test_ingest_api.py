from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from phalanx.server.app import create_app
from phalanx.server.settings import ServerSettings
from phalanx.store.base import Store
from tests.support.aio import run_in_own_loop
from tests.unit.server import fill


def _records(exp: str, n: int, stream: str = "host-1-abc") -> list[dict[str, object]]:
    return [
        {
            "stream": stream,
            "seq": i,
            "kind": "scalar",
            "experiment_id": exp,
            "replica": "worker-1",
            "role": "worker",
            "index": 1,
            "rank": 2,
            "time": 1000.0 + i,
            "data": {"title": "loss", "series": "worker 02", "value": 1.0 / (i + 1), "iteration": i},
        }
        for i in range(n)
    ]


def test_ingest_accepts_a_batch_once(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    batch = {"events": _records(e.id, 50)}
    assert client.post("/api/v1/ingest", json=batch).json() == {"accepted": 50}
    assert client.post("/api/v1/ingest", json=batch).json() == {"accepted": 0}
    series = store.metrics(e.id, "loss")["loss"]["worker 02"]
    assert len(series.steps) == 50


def test_a_resent_batch_overlapping_the_last_one_adds_only_the_new_events(
    client: TestClient, store: Store
) -> None:
    e = fill.experiment(store)
    records = _records(e.id, 30)
    client.post("/api/v1/ingest", json={"events": records[:20]})
    assert client.post("/api/v1/ingest", json={"events": records[10:]}).json() == {"accepted": 10}


def test_a_malformed_event_is_400_and_nothing_is_written(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    records = _records(e.id, 3)
    records.append({"stream": "x", "seq": 0, "kind": "telepathy", "experiment_id": e.id, "data": {}})
    r = client.post("/api/v1/ingest", json={"events": records})
    assert r.status_code == 400
    assert r.json()["error"] == "usage" and "events[3]" in r.json()["message"]
    assert store.metric_titles(e.id) == {}


def test_a_body_that_is_not_an_event_batch_is_422(client: TestClient) -> None:
    for body in ({"event": []}, {"events": "no"}, [1, 2]):
        assert client.post("/api/v1/ingest", json=body).status_code == 422


@pytest.fixture
def small_limits(settings: ServerSettings, store: Store) -> Iterator[TestClient]:
    tight = settings.model_copy(update={"max_ingest_bytes": 2000, "max_file_bytes": 100})
    with TestClient(create_app(tight, store)) as c:
        yield c


def test_a_batch_over_the_size_limit_is_413(small_limits: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    r = small_limits.post("/api/v1/ingest", json={"events": _records(e.id, 100)})
    assert r.status_code == 413 and r.json()["error"] == "payload_too_large"
    assert store.metric_titles(e.id) == {}


def test_a_chunked_body_over_the_limit_is_413_too(small_limits: TestClient, store: Store) -> None:
    e = fill.experiment(store)

    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b"x" * 50

    r = small_limits.put(f"/api/v1/experiments/{e.id}/files/big.bin", content=chunks())
    assert r.status_code == 413
    assert small_limits.put(f"/api/v1/experiments/{e.id}/files/ok.bin", content=b"y" * 100).status_code == 200


def test_put_file_stores_raw_bytes_in_the_experiment_folder(
    client: TestClient, store: Store, phalanx_home: Path
) -> None:
    e = fill.experiment(store)
    r = client.put(
        f"/api/v1/experiments/{e.id[:6]}/files/artifacts/temp%2001.json", content=b'{"worker_rank": 1}'
    )
    assert r.status_code == 200 and r.json() == {"path": "artifacts/temp 01.json", "size": 18}
    assert (
        phalanx_home / "artifacts" / e.id / "artifacts" / "temp 01.json"
    ).read_bytes() == b'{"worker_rank": 1}'


@pytest.mark.parametrize(
    "path",
    [
        "../escape.txt",
        "a/../../escape.txt",
        "%2e%2e/escape.txt",
        "a/%2e%2e/%2e%2e/x",
        "a%5c..%5cx",
        "./x",
        "a//..//b",
    ],
)
def test_put_file_cannot_leave_the_experiment_folder(
    client: TestClient, store: Store, phalanx_home: Path, path: str
) -> None:
    e = fill.experiment(store)
    r = client.put(f"/api/v1/experiments/{e.id}/files/{path}", content=b"pwned")
    inside = phalanx_home / "artifacts" / e.id
    written = [p for p in phalanx_home.rglob("*") if p.is_file() and p.read_bytes() == b"pwned"]
    assert all(inside in p.parents for p in written), written
    assert r.status_code in (400, 404) or (r.status_code == 200 and written), r.text


def test_put_file_to_an_unknown_experiment_is_404(client: TestClient) -> None:
    assert client.put("/api/v1/experiments/0123456789ab/files/a.txt", content=b"x").status_code == 404


@pytest.mark.parametrize(
    "change",
    [
        {"seq": 2**64},
        {"rank": -(2**70)},
        {"index": 10**30},
        {"data": {"title": "loss", "series": "w", "value": 1.0, "iteration": 10**23}},
    ],
)
def test_integers_beyond_64_bits_are_400_not_a_server_error(
    client: TestClient, store: Store, change: dict[str, object]
) -> None:
    e = fill.experiment(store)
    records = _records(e.id, 2)
    records[1].update(change)
    r = client.post("/api/v1/ingest", json={"events": records})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "usage" and "out of range" in r.json()["message"]
    assert store.metric_titles(e.id) == {}


def test_a_time_that_is_not_finite_is_400(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    body = '{"events": [{"stream": "s", "seq": 1, "kind": "scalar", "experiment_id": "%s", "time": 1e400,'
    body += ' "data": {"title": "loss", "series": "w", "value": 1.0, "iteration": 1}}]}'
    r = client.post("/api/v1/ingest", content=body % e.id, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "finite" in r.json()["message"]


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "text/xml", None])
def test_a_batch_not_sent_as_json_is_415_with_a_plain_message(client: TestClient, ctype: str | None) -> None:
    headers = {"Content-Type": ctype} if ctype else {}
    r = client.post("/api/v1/ingest", content=b'{"events": []}', headers=headers)
    assert r.status_code == 415
    assert r.json()["error"] == "unsupported_media_type"
    assert "application/json" in r.json()["message"]


def test_a_json_content_type_with_a_charset_is_accepted(client: TestClient) -> None:
    headers = {"Content-Type": "application/json; charset=utf-8"}
    assert client.post("/api/v1/ingest", content=b'{"events": []}', headers=headers).json() == {"accepted": 0}


@pytest.mark.parametrize("bad", ["../x", "a/b", "a\x00b", "ünï", "", "x" * 65])
def test_an_experiment_id_that_could_name_another_folder_is_400(
    client: TestClient, store: Store, bad: str
) -> None:
    records = _records(bad, 1)
    records.append({**_records(bad, 1)[0], "kind": "experiment", "seq": 9, "data": {"name": "x"}})
    r = client.post("/api/v1/ingest", json={"events": records})
    assert r.status_code == 400, r.text
    assert store.list_experiments().total == 0


@pytest.mark.parametrize("path", ["a/" * 40 + "x", "n" * 300, "d/" * 10 + "y" * 1100])
def test_put_file_with_a_path_too_long_for_a_file_system_is_400(
    client: TestClient, store: Store, path: str
) -> None:
    e = fill.experiment(store)
    r = client.put(f"/api/v1/experiments/{e.id}/files/{path}", content=b"x")
    assert r.status_code == 400 and "too long" in r.json()["message"], r.text


def test_put_file_where_a_folder_or_file_is_in_the_way_is_409(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    assert client.put(f"/api/v1/experiments/{e.id}/files/ckpt/a.bin", content=b"A").status_code == 200
    over_folder = client.put(f"/api/v1/experiments/{e.id}/files/ckpt", content=b"B")
    under_file = client.put(f"/api/v1/experiments/{e.id}/files/ckpt/a.bin/b", content=b"C")
    assert (over_folder.status_code, under_file.status_code) == (409, 409)
    assert over_folder.json()["error"] == "conflict" and "folder" in over_folder.json()["message"]


def test_a_body_that_stalls_is_408_not_a_request_held_for_ever(
    settings: ServerSettings, store: Store
) -> None:
    """Driven as ASGI: the client declares a body, sends a piece of it, then nothing."""
    import asyncio
    import json

    app = create_app(settings.model_copy(update={"body_idle_seconds": 0.3}), store)
    e = fill.experiment(store)
    sent: list[dict[str, object]] = []

    async def main() -> None:
        pieces = [{"type": "http.request", "body": b'{"events": [', "more_body": True}]

        async def receive() -> dict[str, object]:
            if pieces:
                return pieces.pop()
            await asyncio.Event().wait()  # the client went quiet
            return {"type": "http.disconnect"}

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "PUT",
            "scheme": "http",
            "path": f"/api/v1/experiments/{e.id}/files/slow.bin",
            "raw_path": f"/api/v1/experiments/{e.id}/files/slow.bin".encode(),
            "query_string": b"",
            "headers": [(b"content-type", b"application/octet-stream"), (b"content-length", b"1000")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        await asyncio.wait_for(app(scope, receive, send), 30)

    run_in_own_loop(main)
    assert sent[0]["status"] == 408
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))  # type: ignore[misc]
    assert body["error"] == "request_timeout" and "stalled" in body["message"]


def test_a_later_attempt_posting_the_same_steps_replaces_them(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    first = [{**r, "attempt": 0} for r in _records(e.id, 30, stream="first")]
    again = [{**r, "attempt": 1, "data": {**r["data"], "value": 5.0}} for r in _records(e.id, 20, "again")]
    assert client.post("/api/v1/ingest", json={"events": first}).json() == {"accepted": 30}
    assert client.post("/api/v1/ingest", json={"events": again}).json() == {"accepted": 20}
    series = store.metrics(e.id, "loss")["loss"]["worker 02"]
    assert series.steps == list(range(20))  # the requeued run is at step 19: no stale tail either
    assert set(series.values) == {5.0}
    bad = [{**r, "attempt": 2**40} for r in _records(e.id, 1, stream="bad")]
    r = client.post("/api/v1/ingest", json={"events": bad})
    assert r.status_code == 400 and "attempt" in r.json()["message"], r.json()
