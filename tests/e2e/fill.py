"""Filling the browser tests' store with what two runs of seed 003's script (examples/reporting-from-ranks)
under `phalanx run` leave in it, twice with different learning rates, so there are two experiments to
compare: written in-process through the Store protocol and the artifact store, as the supervisor and
the ingester write them.

The UI tests read a run's record, they do not run it: two real runs cost a minute on two loaded cores
(torch and gloo in three replicas each). That `phalanx run` of the example stores exactly this (one
experiment of a master and two workers, artifacts 'temp NN' by rank and replica, loss series 'worker
NN', 'worker_N_stuff' params by rank, Args, each rank's "final loss" line) is
tests/integration/tracking/test_reporting_from_ranks.py's subject; the declared params (section
Declared) are tests/integration/local/test_declared_params.py's; the repro record is the product's own
(``phalanx.repro.collect`` over the example's folder)."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phalanx import repro
from phalanx.config import Settings
from phalanx.domain import Event, EventKind, ExperimentStatus, Replica, ReplicaState, Role
from phalanx.spool import encode_points
from phalanx.store import open_store
from phalanx.store.base import IngestStore
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "reporting-from-ranks" / "polyaxonfile.yml"
ITERATIONS = 20  # the example file's default
REPLICAS = ["master", "worker-0", "worker-1"]  # ranks 0, 1, 2
SYSTEM = ("cpu_percent", "rss_mib", "threads", "processes", "disk_read_mib", "disk_write_mib")


@dataclass
class Filled:
    home: Path
    first: str
    second: str
    topology_text: str
    replicas: list[str]
    loss_series: list[str]
    artifacts: list[str]
    general_params: dict[str, str]  # key -> the replica that connected it
    console_replicas: list[str]
    console_needle: str
    differing_param: str


def _replicas() -> list[Replica]:
    none = {"requests": None, "limits": None}
    master = {"cpu": {"requests": 1, "limits": 1}, "memory": none, "gpu": none}  # the file's resources
    worker = {"cpu": none, "memory": none, "gpu": none}
    return [Replica("", "master", Role.MASTER, 0, 0, resources=master)] + [
        Replica("", f"worker-{i}", Role.WORKER, i, i + 1, resources=worker) for i in range(2)
    ]


class _Run:
    """One replica's writer: its own stream, numbered as a spool numbers it."""

    def __init__(self, exp: str, replica: str) -> None:
        self.exp, self.replica, self.seq = exp, replica, 0
        self.rank = REPLICAS.index(replica)

    def event(self, kind: EventKind, data: dict[str, Any], t: float) -> Event:
        role, _, index = self.replica.partition("-")
        self.seq += 1
        stream = f"e2e-{self.exp}-{self.replica}"
        return Event(
            self.exp, kind, data, self.replica, role, int(index or 0), self.rank, t, stream, self.seq
        )


def record_run(store: IngestStore, lr: float, record: dict[str, Any], snapshot: bytes, t0: float) -> str:
    """One finished run of the example with ``--param lr=LR``, as `phalanx run` records it."""
    file_params = {"iterations": ITERATIONS, "lr": lr}
    launch = {"file": str(EXAMPLE), "params": {"lr": lr}}  # what `phalanx run --param lr=LR` adds
    args = f"train.py --iterations {ITERATIONS} --lr {lr}"
    replicas = _replicas()
    planned = [
        {"name": r.name, "role": str(r.role), "index": r.index, "rank": r.rank, "processes": 1}
        | {"resources": dict(r.resources), "node_selector": {}, "affinity": None, "tolerations": []}
        for r in replicas
    ]
    e = store.create_experiment(
        name="test torch distributed",
        project="examples",
        replicas=replicas,
        framework="pytorch",
        backend="local",
        tags=("pytorch", "tracking", "example"),
        topology={"master": 1, "worker": 2, "ps": 0},
        spec_text=EXAMPLE.read_text(),
        plan={
            "name": "test torch distributed",
            "project": "examples",
            "framework": "pytorch",
            "backend": None,
            "replicas": planned,
            "command": f"python {args}",
            "params": file_params,
            "tags": ["pytorch", "tracking", "example"],
            "max_restarts": 0,
            "launch": {**launch, "commands": {r: f"{sys.executable} {args}" for r in REPLICAS}},
        },
        created_at=t0,
    )
    store.update_experiment(e.id, status=ExperimentStatus.RUNNING, started_at=t0, handle=f"{e.id}:0")
    attempt = store.add_attempt(e.id, kind="start", started_at=t0)
    path = repro.snapshot_path(None)
    assert store.artifact_store is not None
    store.artifact_store.put_bytes(e.id, path, snapshot)
    store.set_repro(
        e.id,
        {
            **record,
            "launch": {**record["launch"], **launch},
            "snapshot": {**record["snapshot"], "path": path},
        },
    )

    events: list[Event] = []
    master = _Run(e.id, "master")
    events.append(master.event(EventKind.PARAM, {"section": "Declared", "values": file_params}, t0))
    for rank, name in enumerate(REPLICAS):
        run = master if rank == 0 else _Run(e.id, name)
        t = t0 + 10 + rank * 0.3
        args = {"nodes": 3, "iterations": ITERATIONS, "lr": lr}
        events.append(run.event(EventKind.PARAM, {"section": "Args", "values": args}, t))
        line = f"{14735 + 2 * rank} ARGS: Namespace(nodes=3, iterations={ITERATIONS}, lr={lr})"
        events.append(run.event(EventKind.LOG, {"stream": "stdout", "lines": [line]}, t))
        path = f"artifacts/e2e-{rank}/temp {rank:02d}.json"
        body = json.dumps({"worker_rank": rank}, indent=2).encode()
        store.artifact_store.put_bytes(e.id, path, body)
        upload = {"name": f"temp {rank:02d}", "kind": "json", "path": path, "size": len(body)}
        events.append(run.event(EventKind.ARTIFACT, {**upload, "content_type": "application/json"}, t))
        loss = [(16.0 + rank) * 0.66**i + 0.017 for i in range(ITERATIONS)]
        series = f"worker {rank:02d}"
        points = [("loss", series, i, v, t + 0.5 * i) for i, v in enumerate(loss)]
        events.append(run.event(EventKind.SCALAR, encode_points(points), t + 0.5 * ITERATIONS))
        samples = [
            (f"system/{title}", name, step, 10.0 + step * (k + 1) + rank, t0 + 5.0 * step)
            for k, title in enumerate(SYSTEM)
            for step in range(6)
        ]
        events.append(run.event(EventKind.SCALAR, encode_points(samples), t0 + 30))
        stuff = {f"worker_{rank}_stuff": f"some stuff {17 * rank + 15}"}
        events.append(run.event(EventKind.PARAM, {"section": "General", "values": stuff}, t0 + 20))
        final = f"worker {rank:02d}: final loss {loss[-1]:.4f}"
        events.append(run.event(EventKind.LOG, {"stream": "stdout", "lines": [final]}, t0 + 20))
    store.write_events(events)
    for rank, name in enumerate(REPLICAS):
        store.update_replica(
            e.id,
            name,
            state=ReplicaState.SUCCEEDED,
            host="127.0.0.1",
            pid=14716 + 2 * rank,
            exit_code=0,
            started_at=t0 + 0.1,
            finished_at=t0 + 27,
        )
    store.finish_attempt(e.id, attempt, status=ExperimentStatus.SUCCEEDED)
    store.update_experiment(e.id, status=ExperimentStatus.SUCCEEDED, finished_at=t0 + 28)
    return str(e.id)


def fill_with_runs(home: Path) -> Filled:
    workdir = str(EXAMPLE.parent)
    record, snapshot = repro.collect(
        workdir=workdir,
        python=sys.executable,
        launch={"workdir": workdir, "cluster": None, "oversubscribe": False},
    )
    now = time.time()
    store = open_store(Settings(home=home))
    try:
        first = record_run(store, 0.1, record, snapshot, now - 120)
        second = record_run(store, 0.02, record, snapshot, now - 60)
    finally:
        store.close()
    return Filled(
        home=home,
        first=first,
        second=second,
        topology_text="1 master · 2 workers",
        replicas=list(REPLICAS),
        loss_series=["worker 00", "worker 01", "worker 02"],
        artifacts=["temp 00", "temp 01", "temp 02"],
        general_params={
            "worker_0_stuff": "master",
            "worker_1_stuff": "worker-0",
            "worker_2_stuff": "worker-1",
        },
        console_replicas=list(REPLICAS),
        console_needle="final loss",
        differing_param="lr",
    )
