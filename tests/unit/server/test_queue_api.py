"""GET /api/v1/queue: this machine's ledger as `phalanx queue -o json` shows it, with why each
waiting run waits."""

from __future__ import annotations

import json
import os

from fastapi.testclient import TestClient

from phalanx.domain import ExperimentStatus
from phalanx.machine.ledger import Capacity, Need
from phalanx.queue import ledger_for
from phalanx.server.routes.queue import why_waiting
from phalanx.server.settings import ServerSettings
from phalanx.store.base import Store
from tests.unit.server import fill
from tests.unit.server.teams_fixtures import make_team

HUGE = Capacity(cpus=tuple(range(4096)), gpus=(), memory_mib=1e9)


def test_the_queue_lists_what_runs_and_what_waits_and_why(
    client: TestClient, settings: ServerSettings
) -> None:
    ledger = ledger_for(settings.store)
    me = os.getpid()  # a live owner, as each entry's `phalanx run` is
    assert ledger.admit("holder", Need(cpus=4096), HUGE, pid=me, name="big")[0] is not None
    assert ledger.admit("waiter", Need(cpus=4), HUGE, pid=me, name="small", priority=2)[0] is None
    assert ledger.admit("later", Need(cpus=1), HUGE, pid=me)[0] is None
    doc = client.get("/api/v1/queue").json()
    assert [r["experiment_id"] for r in doc["running"]] == ["holder"]
    waiting = doc["queued"]
    assert [(r["experiment_id"], r["position"], r["priority"]) for r in waiting] == [
        ("waiter", 1, 2),
        ("later", 2, 0),
    ]
    assert waiting[0]["why"] == "waits for 4 cores (0 free)"
    assert waiting[1]["why"] == "waits for 1 core (0 free); 1 run ahead of it in the queue"
    assert "ledger" not in doc and str(settings.store.home) not in json.dumps(doc)  # no server path


def test_why_a_run_waits_in_words() -> None:
    free = {"cpus": 8, "gpus": 0, "memory_mib": 1000}
    row = {"needs": {"cpus": 2, "gpus": 1, "memory_mib": 4096}, "position": 3}
    assert (
        why_waiting(row, free)
        == "waits for 1 GPU (0 free), 4096 MiB (1000 MiB free); 2 runs ahead of it in the queue"
    )
    assert why_waiting({"needs": {"cpus": 2}, "position": 1}, free).startswith("starts at its next look")


def test_a_member_of_one_project_sees_the_others_runs_masked_and_changes_only_its_own(
    client: TestClient, settings: ServerSettings, store: Store
) -> None:
    team = make_team(store)
    mine = fill.experiment(store, name="mine", project="A", status=ExperimentStatus.QUEUED)
    theirs = fill.experiment(store, name="secret-b-run", project="B", status=ExperimentStatus.RUNNING)
    later = fill.experiment(store, name="later", project="A", status=ExperimentStatus.QUEUED)
    ledger = ledger_for(settings.store)
    me = os.getpid()
    ledger.admit(theirs.id, Need(cpus=4096), HUGE, pid=me, name=theirs.name, project="B")
    ledger.admit(mine.id, Need(cpus=2), HUGE, pid=me, name=mine.name, project="A")
    ledger.admit(later.id, Need(cpus=1), HUGE, pid=me, name=later.name, project="A")

    def as_(role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {team.tokens[role]}"}

    doc = client.get("/api/v1/queue", headers=as_("editor_a")).json()
    (held,) = doc["running"]
    assert held["masked"] and held["experiment_id"] is None and held["project"] is None
    assert held["name"] == "(a run of another project)" and "secret" not in str(doc)
    assert [(r["experiment_id"], r["project"], r["may_change"]) for r in doc["queued"]] == [
        (mine.id, "A", True),
        (later.id, "A", True),
    ]
    assert [p["project"] for p in doc["projects"]] == ["A"] and {r["target"] for r in doc["queued"]} == {
        "local"
    }
    viewer = client.get("/api/v1/queue", headers=as_("viewer_a")).json()
    assert [r["may_change"] for r in viewer["queued"]] == [False, False]
    assert (
        client.patch(f"/api/v1/queue/{later.id}", json={"priority": 5}, headers=as_("viewer_a")).status_code
        == 403
    )
    assert (
        client.patch(f"/api/v1/queue/{theirs.id}", json={"priority": 5}, headers=as_("editor_a")).status_code
        == 404
    )
    r = client.patch(f"/api/v1/queue/{later.id}", json={"priority": 5}, headers=as_("editor_a"))
    assert r.status_code == 200 and r.json() == {"experiment_id": later.id, "priority": 5}
    order = client.get("/api/v1/queue", headers=as_("editor_a")).json()["queued"]
    assert [(r["experiment_id"], r["position"]) for r in order] == [(later.id, 1), (mine.id, 2)]
    running = client.patch(f"/api/v1/queue/{theirs.id}", json={"priority": 5}, headers=as_("root"))
    assert running.status_code == 409 and "not waiting" in running.json()["message"]
    too_high = client.patch(f"/api/v1/queue/{later.id}", json={"priority": 10**6}, headers=as_("root"))
    assert too_high.status_code == 422


def test_runs_waiting_on_a_cluster_target_are_listed_with_their_target(
    client: TestClient, store: Store
) -> None:
    e = fill.experiment(store, name="on-slurm", status=ExperimentStatus.PENDING)
    store.update_experiment(e.id, cluster="gpu-slurm", reason="Resources")
    (row,) = client.get("/api/v1/queue").json()["elsewhere"]
    assert (row["experiment_id"], row["target"], row["why"]) == (e.id, "gpu-slurm", "Resources")
