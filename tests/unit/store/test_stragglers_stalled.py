"""The pace view names a rank that stopped reporting while the others go on (hung in a collective,
stuck on I/O): its pace runs to now while it runs, instead of the pace it had before it stopped."""

from __future__ import annotations

import time

from phalanx.domain import Event, EventKind, ExperimentStatus, Replica, ReplicaState, Role
from phalanx.store.sql import SqlStore
from phalanx.stragglers import last_steps, pace


def _experiment(store: SqlStore) -> str:
    replicas = [
        Replica("", "master", Role.MASTER, 0, 0),
        Replica("", "worker-0", Role.WORKER, 0, 1),
        Replica("", "worker-1", Role.WORKER, 1, 2),
    ]
    exp = store.create_experiment(name="stall", project="p", replicas=replicas, backend="local").id
    for i, name in enumerate(("master", "worker-0", "worker-1")):
        steps = range(3) if name == "worker-0" else range(40)  # worker-0 went silent 37 s ago
        now = time.time()
        data = {"points": [["loss", name, s, 1.0, now - 40 + s] for s in steps]}
        store.write_events([Event(exp, EventKind.SCALAR, data, stream=f"s{i}", seq=0)])
    return exp


def test_a_running_rank_that_stopped_reporting_is_named(store: SqlStore) -> None:
    exp = _experiment(store)
    store.update_experiment(exp, status=ExperimentStatus.RUNNING)
    for name in ("master", "worker-0", "worker-1"):
        store.update_replica(exp, name, state=ReplicaState.RUNNING)
    doc = pace(store, exp)
    assert doc is not None and doc["straggler"] is not None, doc
    assert doc["straggler"]["replica"] == "worker-0"
    assert doc["straggler"]["silent_seconds"] > 30
    others = [r for r in doc["ranks"] if r["replica"] != "worker-0"]
    assert all("silent_seconds" not in r for r in others)


def test_a_finished_run_is_measured_over_the_points_only(store: SqlStore) -> None:
    exp = _experiment(store)
    store.update_experiment(exp, status=ExperimentStatus.SUCCEEDED)
    doc = pace(store, exp)
    assert doc is not None and doc["straggler"] is None, doc  # each rank ran at 1 step/s


def test_series_named_by_rank_are_measured_and_named_as_their_replica(store: SqlStore) -> None:
    """Seed 003 names a rank's series `rank N`, not after the replica: the stalled rank is still
    found among the running replicas and named as the replica that reported it."""
    replicas = [
        Replica("", "master", Role.MASTER, 0, 0),
        Replica("", "worker-0", Role.WORKER, 0, 1),
        Replica("", "worker-1", Role.WORKER, 1, 2),
    ]
    exp = store.create_experiment(name="ranks", project="p", replicas=replicas, backend="local").id
    now = time.time()
    for rank, name in enumerate(("master", "worker-0", "worker-1")):
        steps = range(3) if name == "worker-0" else range(40)
        data = {"points": [["loss", f"rank {rank}", s, 1.0, now - 40 + s] for s in steps]}
        store.write_events([Event(exp, EventKind.SCALAR, data, replica=name, rank=rank, stream=f"r{rank}")])
    store.update_experiment(exp, status=ExperimentStatus.RUNNING)
    for name in ("master", "worker-0", "worker-1"):
        store.update_replica(exp, name, state=ReplicaState.RUNNING)
    doc = pace(store, exp)
    assert doc is not None and doc["straggler"] is not None, doc
    assert doc["straggler"]["replica"] == "worker-0" and doc["straggler"]["series"] == "rank 1"
    assert doc["straggler"]["silent_seconds"] > 30
    assert last_steps(store, exp) == {"master": 39, "worker-0": 2, "worker-1": 39}


def test_one_scripts_train_and_val_series_are_no_ranks_and_name_no_straggler(store: SqlStore) -> None:
    """`report_scalar("loss", "train", ...)` every step and `("loss", "val", ...)` every fifth, from one
    process: two series of one title are not two ranks, so `phalanx get` shows no pace (it showed
    `val` as a straggler 63 % below the median) and the liveness check sees no rank behind."""
    exp = store.create_experiment(
        name="script", project="p", replicas=[Replica("", "master", Role.MASTER, 0, 0)], backend="local"
    ).id
    now = time.time()
    points = [["loss", "train", s, 1.0, now - 40 + s] for s in range(40)]
    points += [["loss", "val", s, 1.0, now - 40 + 5 * s] for s in range(8)]
    store.write_events(
        [Event(exp, EventKind.SCALAR, {"points": points}, replica="master", rank=0, stream="m")]
    )
    store.update_experiment(exp, status=ExperimentStatus.SUCCEEDED)
    assert pace(store, exp) is None
    assert last_steps(store, exp) == {}
    gpus = store.create_experiment(
        name="gpus", project="p", replicas=[Replica("", "master", Role.MASTER, 0, 0)], backend="local"
    ).id
    numbered = [["loss", f"gpu-{g}", s, 1.0, now - 40 + s * (g + 1)] for g in range(2) for s in range(10)]
    store.write_events(
        [Event(gpus, EventKind.SCALAR, {"points": numbered}, replica="master", rank=0, stream="n")]
    )
    split = [["acc", name, s, 1.0, now - 40 + s] for name in ("train", "val", "test") for s in range(10)]
    store.write_events(
        [Event(gpus, EventKind.SCALAR, {"points": split}, replica="master", rank=0, stream="t")]
    )
    store.update_experiment(gpus, status=ExperimentStatus.SUCCEEDED)
    doc = pace(store, gpus)  # one process reporting each GPU's series: they stand for ranks, as named
    # (a title of more series that are no ranks, train/val/test, does not hide them)
    assert doc is not None and doc["straggler"]["replica"] == "gpu-1", doc
