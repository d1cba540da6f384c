"""GET /api/v1/queue: this machine's ledger as `phalanx queue -o json` shows it, with why each
waiting run waits."""

from __future__ import annotations

import os

from fastapi.testclient import TestClient

from phalanx.machine.ledger import Capacity, Need
from phalanx.queue import ledger_for
from phalanx.server.routes.queue import why_waiting
from phalanx.server.settings import ServerSettings

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


def test_why_a_run_waits_in_words() -> None:
    free = {"cpus": 8, "gpus": 0, "memory_mib": 1000}
    row = {"needs": {"cpus": 2, "gpus": 1, "memory_mib": 4096}, "position": 3}
    assert (
        why_waiting(row, free)
        == "waits for 1 GPU (0 free), 4096 MiB (1000 MiB free); 2 runs ahead of it in the queue"
    )
    assert why_waiting({"needs": {"cpus": 2}, "position": 1}, free).startswith("starts at its next look")
