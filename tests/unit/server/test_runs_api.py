"""The API serves checkpoints, attempts, what ran and the diff of two experiments as JSON."""

from __future__ import annotations

from fastapi.testclient import TestClient

from phalanx.domain import Event, EventKind, ExperimentStatus
from phalanx.store.base import Store


def test_checkpoints_attempts_source_and_diff(client: TestClient, store: Store) -> None:
    a = store.create_experiment(name="a", project="p", plan={"params": {"lr": 0.1}}).id
    b = store.create_experiment(name="b", project="p", plan={"params": {"lr": 0.5}}).id
    data = {
        "name": "checkpoint-3",
        "kind": "checkpoint",
        "path": "checkpoints/master/step-000000003.pkl",
        "size": 3,
        "metadata": {"step": 3, "metrics": {"loss": 0.25}, "policy": {}},
    }
    store.write_events([Event(a, EventKind.ARTIFACT, data, stream="s", seq=0)])
    n = store.add_attempt(a, kind="start")
    store.finish_attempt(a, n, status=ExperimentStatus.FAILED, reason="worker-0 exited with code 137")
    store.add_attempt(a, kind="restart", checkpoint_step=3)
    store.set_repro(a, {"git": {"commit": "abc", "branch": "main", "dirty": False}, "packages": ["x==1"]})

    got = client.get(f"/api/v1/experiments/{a}/checkpoints").json()
    assert got["latest"]["step"] == 3 and got["latest"]["metrics"] == {"loss": 0.25}
    run = client.get(f"/api/v1/experiments/{a[:6]}/run").json()
    assert [(x["kind"], x["status"], x["checkpoint_step"]) for x in run["attempts"]] == [
        ("start", "failed", None),
        ("restart", "running", 3),
    ]
    assert run["source"]["git"]["commit"] == "abc" and run["source"]["packages"] == 1
    assert client.get(f"/api/v1/experiments/{a}/source").json()["packages"] == ["x==1"]
    unrecorded = client.get(f"/api/v1/experiments/{a}/diff/{b}").json()
    assert unrecorded["params"] == {"lr": {"a": 0.1, "b": 0.5}}
    assert unrecorded["packages"] == {} and unrecorded["unrecorded"]["b"][0] == "environment"
    store.set_repro(b, {"python": "3.11.7", "packages": []})
    diff = client.get(f"/api/v1/experiments/{a}/diff/{b}").json()
    assert diff["packages"] == {"x": {"a": "1", "b": None}}
    assert client.get("/api/v1/experiments/nope/run").status_code == 404
