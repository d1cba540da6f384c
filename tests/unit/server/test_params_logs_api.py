from fastapi.testclient import TestClient

from phalanx.domain import BUILD_CONSOLE, EventKind, ExperimentStatus
from phalanx.store.base import Store
from tests.unit.server import fill


def test_params_say_which_replica_each_came_from(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    fill.param(store, e.id, "Args", "lr", 0.1, replica="master")
    fill.param(store, e.id, "General", "worker_1_stuff", "some stuff 7", replica="worker-0")
    rows = client.get(f"/api/v1/experiments/{e.id}/params").json()
    by_key = {r["key"]: r for r in rows}
    assert by_key["lr"]["section"] == "Args" and by_key["lr"]["value"] == 0.1
    assert by_key["worker_1_stuff"]["replica"] == "worker-0" and by_key["worker_1_stuff"]["rank"] == 1


def test_logs_page_per_replica_from_an_offset(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    fill.log_lines(store, e.id, "worker-0", [f"w0 line {i}" for i in range(5)])
    fill.log_lines(store, e.id, "worker-1", ["w1 hello"])
    doc = client.get(
        f"/api/v1/experiments/{e.id}/logs", params={"replica": "worker-0", "offset": 2, "limit": 2}
    ).json()
    assert [line["text"] for line in doc["lines"]] == ["w0 line 2", "w0 line 3"]
    assert doc["next_offset"] == 4
    everything = client.get(f"/api/v1/experiments/{e.id}/logs").json()["lines"]
    assert {line["replica"] for line in everything} == {"worker-0", "worker-1"}


def test_the_logs_of_a_replica_the_experiment_never_had_are_a_404_with_the_nearest_name(
    client: TestClient, store: Store
) -> None:
    e = fill.experiment(store)  # master, worker-0, worker-1
    fill.log_lines(store, e.id, "worker-0", ["w0 hello"])
    for path in ("logs", "logs.txt", "logs/stream"):
        r = client.get(f"/api/v1/experiments/{e.id}/{path}", params={"replica": "wrker-0"})
        assert r.status_code == 404, (path, r.text)
        assert "no replica 'wrker-0'" in r.text and "did you mean 'worker-0'?" in r.text
    assert (
        client.get(f"/api/v1/experiments/{e.id}/logs", params={"replica": "worker-1"}).json()["lines"] == []
    )


def _events(body: str) -> list[tuple[str, str]]:
    out = []
    for block in body.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":")
        )
        if "event" in fields:
            out.append((fields["event"], fields.get("data", "")))
    return out


def test_stream_of_a_finished_experiment_sends_every_line_then_ends(client: TestClient, store: Store) -> None:
    e = fill.experiment(store, status=ExperimentStatus.SUCCEEDED)
    fill.log_lines(store, e.id, "master", ["starting", "done"])
    fill.log_lines(store, e.id, "worker-0", ["rank 1 ready"], stream="stderr")
    with client.stream("GET", f"/api/v1/experiments/{e.id}/logs/stream") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = _events(r.read().decode())
    kinds = [k for k, _ in events]
    assert kinds.count("line") == 3 and kinds[-1] == "end"
    assert any('"rank 1 ready"' in d and '"stderr"' in d for _, d in events)


def test_stream_sends_the_environment_builds_lines_too(client: TestClient, store: Store) -> None:
    """The UI's console of an experiment whose environment was built: pip's lines (source
    ``build``, not a replica) come in the stream as the replicas' do."""
    e = fill.experiment(store, status=ExperimentStatus.SUCCEEDED)
    fill.log_lines(store, e.id, BUILD_CONSOLE, ["Successfully installed tinypkg-1.0"])
    fill.log_lines(store, e.id, "master", ["done"])
    with client.stream("GET", f"/api/v1/experiments/{e.id}/logs/stream") as r:
        events = _events(r.read().decode())
    texts = [d for k, d in events if k == "line"]
    assert len(texts) == 2 and any('"Successfully installed tinypkg-1.0"' in d for d in texts), texts


def test_stream_of_one_replica_starts_at_the_offset(client: TestClient, store: Store) -> None:
    e = fill.experiment(store, status=ExperimentStatus.FAILED)
    fill.log_lines(store, e.id, "worker-1", ["a", "b", "c"])
    fill.log_lines(store, e.id, "master", ["m"])
    with client.stream(
        "GET", f"/api/v1/experiments/{e.id}/logs/stream", params={"replica": "worker-1", "offset": 1}
    ) as r:
        events = _events(r.read().decode())
    texts = [d for k, d in events if k == "line"]
    assert len(texts) == 2 and '"b"' in texts[0] and '"c"' in texts[1]


def test_text_reports_do_not_break_the_other_endpoints(client: TestClient, store: Store) -> None:
    e = fill.experiment(store)
    store.write_events([fill.event(e.id, EventKind.TEXT, {"title": "note", "text": "hi"})])
    assert client.get(f"/api/v1/experiments/{e.id}").status_code == 200


def _ids(body: str) -> list[str]:
    return [line[4:] for line in body.splitlines() if line.startswith("id: ")]


def test_a_reconnecting_stream_resumes_after_the_last_event_id(client: TestClient, store: Store) -> None:
    e = fill.experiment(store, status=ExperimentStatus.SUCCEEDED)
    fill.log_lines(store, e.id, "master", [f"m{i}" for i in range(4)])
    fill.log_lines(store, e.id, "worker-0", [f"w{i}" for i in range(3)])
    url = f"/api/v1/experiments/{e.id}/logs/stream"
    with client.stream("GET", url) as r:
        body = r.read().decode()
    everything = [d for k, d in _events(body) if k == "line"]
    assert len(everything) == 7
    # The browser got the first 3 events, lost the connection, and reconnects with the last id.
    with client.stream("GET", url, headers={"Last-Event-ID": _ids(body)[2]}) as r:
        rest = [d for k, d in _events(r.read().decode()) if k == "line"]
    assert rest == everything[3:]


def test_a_malformed_last_event_id_starts_over(client: TestClient, store: Store) -> None:
    e = fill.experiment(store, status=ExperimentStatus.SUCCEEDED)
    fill.log_lines(store, e.id, "master", ["a", "b"])
    for bad in ["master:-1", "garbage", "master:99999999999999999", ":3", "master:1,,"]:
        with client.stream(
            "GET", f"/api/v1/experiments/{e.id}/logs/stream", headers={"Last-Event-ID": bad}
        ) as r:
            assert r.status_code == 200
            assert len([k for k, _ in _events(r.read().decode()) if k == "line"]) == 2, bad
