"""Filling a store through the Store protocol, the way the supervisor and the ingester do, so the
API tests read what real experiments hold."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.domain import Event, EventKind, Experiment, ExperimentStatus, Replica, Role
from phalanx.store.base import Store

_seq = itertools.count()


def replicas_for(n_workers: int, n_ps: int = 0) -> list[Replica]:
    out = [Replica("", "master", Role.MASTER, 0, 0, resources={"cpu": {"requests": 1, "limits": 2}})]
    out += [Replica("", f"worker-{i}", Role.WORKER, i, i + 1) for i in range(n_workers)]
    out += [Replica("", f"ps-{i}", Role.PS, i, None) for i in range(n_ps)]
    return out


def experiment(
    store: Store,
    name: str = "ddp",
    project: str = "examples",
    n_workers: int = 2,
    n_ps: int = 0,
    status: ExperimentStatus = ExperimentStatus.SUCCEEDED,
    tags: Iterable[str] = (),
    spec_text: str | None = "version: 1\nkind: experiment\n",
) -> Experiment:
    topology = {"master": 1, "worker": n_workers} | ({"ps": n_ps} if n_ps else {})
    e = store.create_experiment(
        name=name,
        project=project,
        replicas=replicas_for(n_workers, n_ps),
        framework="pytorch",
        backend="native",
        tags=tuple(tags),
        topology=topology,
        spec_text=spec_text,
    )
    if status is not ExperimentStatus.CREATED:
        now = time.time()
        store.update_experiment(
            e.id, status=status, started_at=now - 5, finished_at=now if status.done else None
        )
    return store.get_experiment(e.id)


def event(
    experiment_id: str, kind: EventKind, data: Mapping[str, Any], replica: str = "master", **kw: Any
) -> Event:
    role, _, index = replica.partition("-")
    rank = kw.pop("rank", 0 if replica == "master" else (int(index) + 1 if role == "worker" else None))
    return Event(
        experiment_id=experiment_id,
        kind=kind,
        data=dict(data),
        replica=replica,
        role=role,
        index=int(index or 0),
        rank=rank,
        time=kw.pop("time", time.time()),
        stream=kw.pop("stream", "test-stream"),
        seq=kw.pop("seq", next(_seq)),
    )


def scalars(
    store: Store,
    experiment_id: str,
    title: str,
    series: str,
    values: Iterable[float],
    replica: str = "master",
) -> None:
    now = time.time()
    store.write_events(
        [
            event(
                experiment_id,
                EventKind.SCALAR,
                {"title": title, "series": series, "value": v, "iteration": i},
                replica,
                time=now + i,
            )
            for i, v in enumerate(values)
        ]
    )


def log_lines(
    store: Store, experiment_id: str, replica: str, lines: Iterable[str], stream: str = "stdout"
) -> None:
    now = time.time()
    store.write_events(
        [
            event(experiment_id, EventKind.LOG, {"text": t, "stream": stream}, replica, time=now + i * 1e-3)
            for i, t in enumerate(lines)
        ]
    )


def param(
    store: Store, experiment_id: str, section: str, key: str, value: Any, replica: str = "master"
) -> None:
    store.write_events(
        [event(experiment_id, EventKind.PARAM, {"section": section, "key": key, "value": value}, replica)]
    )
