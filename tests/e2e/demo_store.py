"""A store filled the way real experiments fill it (through the Store protocol and the artifact
store), for looking at the UI by hand and for the browser test's large-series check.

    python -m tests.e2e.demo_store PHALANX_HOME [--points N]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import math
import random
import time
from pathlib import Path
from typing import Any

from phalanx.config import Settings
from phalanx.domain import Event, EventKind, ExperimentStatus, Replica, ReplicaState, Role
from phalanx.store import open_store
from phalanx.store.base import IngestStore

SPEC = """version: 1
kind: experiment
framework: pytorch
tags: [examples, seed-003]
params:
  lr: {lr}
environment:
  resources:
    cpu: {{requests: 1, limits: 2}}
  replicas:
    n_workers: {n}
run:
  cmd: python train.py --lr={{{{ lr }}}}
"""


def _png() -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1, 2, 3], [3, 1.5, 1.0, 0.7])
    ax.set_title("confusion-ish")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return buf.getvalue()


class Filler:
    def __init__(self, store: IngestStore) -> None:
        self.store = store
        self.seq = 0

    def ev(self, exp: str, kind: EventKind, data: dict[str, object], replica: str, t: float) -> Event:
        role, _, idx = replica.partition("-")
        rank = 0 if role == "master" else (int(idx) + 1 if role == "worker" else None)
        self.seq += 1
        return Event(exp, kind, data, replica, role, int(idx or 0), rank, t, "demo", self.seq)

    def experiment(
        self,
        name: str,
        lr: float,
        n_workers: int,
        points: int,
        status: ExperimentStatus,
        reason: str | None = None,
        n_ps: int = 0,
    ) -> str:
        reps = [
            Replica(
                "",
                "master",
                Role.MASTER,
                0,
                0,
                resources={"cpu": {"requests": 1, "limits": 2}, "memory": {"requests": 512, "limits": 1024}},
            )
        ]
        reps += [Replica("", f"worker-{i}", Role.WORKER, i, i + 1) for i in range(n_workers)]
        reps += [Replica("", f"ps-{i}", Role.PS, i, None) for i in range(n_ps)]
        topo = {"master": 1, "worker": n_workers} | ({"ps": n_ps} if n_ps else {})
        e = self.store.create_experiment(
            name=name,
            project="examples",
            replicas=reps,
            framework="pytorch",
            backend="native",
            tags=("examples", "seed-003"),
            topology=topo,
            spec_text=SPEC.format(lr=lr, n=n_workers),
        )
        t0 = time.time() - 600
        self.store.update_experiment(e.id, status=ExperimentStatus.RUNNING, started_at=t0)
        names = [r.name for r in reps]
        events: list[Event] = []
        rng = random.Random(hash(name) & 0xFFFF)
        for r in names:
            if r.startswith("ps"):
                continue
            series = f"worker {int(r.split('-')[1]) + 1:02d}" if r.startswith("worker") else "worker 00"
            pts = []
            for i in range(points):
                v = 2.3 * math.exp(-i * lr * 20 / points) + 0.05 + rng.random() * 0.08
                pts.append(["loss", series, i, v, t0 + i * 0.01])
            pts.append(["accuracy", series, points - 1, 0.9 + rng.random() * 0.05, t0 + points * 0.01])
            events.append(self.ev(e.id, EventKind.SCALAR, {"points": pts}, r, t0))
            events.append(
                self.ev(
                    e.id,
                    EventKind.PARAM,
                    {"section": "Args", "values": {"lr": lr, "epochs": 10, "batch_size": 64}},
                    r,
                    t0,
                )
            )
            rank = 0 if r == "master" else int(r.split("-")[1]) + 1
            events.append(
                self.ev(
                    e.id,
                    EventKind.PARAM,
                    {
                        "section": "General",
                        "key": f"worker_{rank}_stuff",
                        "value": f"some stuff {rng.randint(0, 100)}",
                    },
                    r,
                    t0,
                )
            )
            lines = [f"rank {rank}: epoch {k} loss {2.3 / (k + 1):.4f}" for k in range(10)] + [
                f"rank {rank}: done"
            ]
            events.append(self.ev(e.id, EventKind.LOG, {"lines": lines, "stream": "stdout"}, r, t0 + 1))
            data = json.dumps({"worker_rank": rank}).encode()
            path = f"artifacts/temp {rank:02d}.json"
            assert self.store.artifact_store is not None
            self.store.artifact_store.put_bytes(e.id, path, data)
            events.append(
                self.ev(
                    e.id,
                    EventKind.ARTIFACT,
                    {
                        "name": f"temp {rank:02d}",
                        "kind": "json",
                        "path": path,
                        "size": len(data),
                        "content_type": "application/json",
                    },
                    r,
                    t0 + 2,
                )
            )
        for r in names:
            if r.startswith("ps"):
                events.append(
                    self.ev(
                        e.id, EventKind.LOG, {"text": "parameter server listening", "stream": "stderr"}, r, t0
                    )
                )
        png = _png()
        assert self.store.artifact_store is not None
        self.store.artifact_store.put_bytes(e.id, "artifacts/curve.png", png)
        events.append(
            self.ev(
                e.id,
                EventKind.ARTIFACT,
                {
                    "name": "curve",
                    "kind": "image",
                    "path": "artifacts/curve.png",
                    "size": len(png),
                    "content_type": "image/png",
                },
                "master",
                t0,
            )
        )
        self.store.artifact_store.put_bytes(e.id, "models/mlp.onnx", b"\x08\x07onnx")
        events.append(
            self.ev(
                e.id,
                EventKind.MODEL,
                {
                    "name": "mlp",
                    "format": "onnx",
                    "path": "models/mlp.onnx",
                    "size": 7,
                    "metadata": {"opset": 18},
                },
                "master",
                t0,
            )
        )
        self.store.write_events(events)
        for i, r in enumerate(reps):
            done = status.done
            state = (
                ReplicaState.RUNNING
                if not done
                else (
                    ReplicaState.FAILED
                    if status is ExperimentStatus.FAILED and i == len(reps) - 1
                    else ReplicaState.STOPPED
                    if status is ExperimentStatus.FAILED
                    else ReplicaState(status.value)
                )
            )
            self.store.update_replica(
                e.id,
                r.name,
                state=state,
                host="localhost",
                pid=40000 + i,
                exit_code=(1 if state is ReplicaState.FAILED else 0) if done else None,
                reason="exit code 1: RuntimeError: boom" if state is ReplicaState.FAILED else None,
                started_at=t0,
            )
        if status.done:
            self.store.update_experiment(e.id, status=status, reason=reason, finished_at=t0 + 95)
        return e.id


def fill(home: Path, points: int = 500) -> dict[str, str]:
    store = open_store(Settings(home=home))
    f = Filler(store)
    ids = {
        "a": f.experiment("test torch distributed", 0.01, 3, points, ExperimentStatus.SUCCEEDED, n_ps=1),
        "b": f.experiment("test torch distributed lr=0.05", 0.05, 3, points, ExperimentStatus.SUCCEEDED),
        "c": f.experiment(
            "broken run",
            0.1,
            2,
            50,
            ExperimentStatus.FAILED,
            reason="worker-1 failed: exit code 1\nRuntimeError: boom",
        ),
        "d": f.experiment("still running", 0.02, 2, 100, ExperimentStatus.RUNNING),
    }
    store.close()
    return ids


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("home", type=Path)
    p.add_argument("--points", type=int, default=500)
    a = p.parse_args()
    print(json.dumps(fill(a.home, a.points)))


def columns(title: str, series: str, steps: Any, values: Any, times: Any) -> dict[str, Any]:
    """A SCALAR event's data for one series of numpy arrays, in the SDK's column form
    (``phalanx.spool.encode_points``: little-endian int64 steps, float64 values and times in base64),
    built from the arrays' bytes instead of a Python tuple per point."""
    return {
        "keys": [[title, series]],
        "n": len(steps),
        "step": base64.b64encode(steps.astype("<i8").tobytes()).decode("ascii"),
        "value": base64.b64encode(values.astype("<f8").tobytes()).decode("ascii"),
        "time": base64.b64encode(times.astype("<f8").tobytes()).decode("ascii"),
    }


def fill_large(home: Path, n_series: int = 8, points: int = 100_000) -> str:
    """One experiment with ``n_series`` loss series of ``points`` points each (and one spike), written
    in the SDK's column form (``columns``): 800,000 points as JSON lists cost seconds to build and as
    much again to read."""
    import numpy as np

    store = open_store(Settings(home=home))
    e = store.create_experiment(
        name=f"{n_series} x {points} points",
        project="bench",
        replicas=[Replica("", "master", Role.MASTER, 0, 0)],
        topology={"master": 1},
        framework="pytorch",
    )
    t0 = time.time() - 3600
    steps = np.arange(points)
    events = []
    for w in range(n_series):
        values = 2 * np.exp(-steps / (points / 3)) + 0.05 * ((steps * 7919 + w) % 13) / 13
        if w == 0:
            values[points // 2] = 9.5  # a spike the downsampling must keep
        data = columns("loss", f"worker {w:02d}", steps, values, t0 + steps * 0.01)
        events.append(Event(e.id, EventKind.SCALAR, data, "master", "master", 0, 0, t0, "large", w))
    store.write_events(events)
    store.update_experiment(
        e.id, status=ExperimentStatus.SUCCEEDED, started_at=t0, finished_at=t0 + points * 0.01
    )
    store.close()
    return e.id
