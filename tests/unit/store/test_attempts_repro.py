"""Attempts and the reproducibility record, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from phalanx.domain import ExperimentStatus, ReplicaState, Role
from phalanx.domain import Replica as R
from phalanx.errors import Conflict
from phalanx.store.sql import SqlStore


def test_attempts_are_numbered_and_a_stopped_experiment_reopens(store: SqlStore) -> None:
    exp = store.create_experiment(
        name="e", project="p", replicas=[R("", "master", Role.MASTER, 0, 0)], status=ExperimentStatus.RUNNING
    ).id
    first = store.add_attempt(exp, kind="start")
    store.finish_attempt(exp, first, status=ExperimentStatus.STOPPED, reason="stopped on request")
    with pytest.raises(Conflict, match="only a failed or stopped one"):
        store.reopen_experiment(exp)  # still running
    store.update_replica(exp, "master", state=ReplicaState.STOPPED, exit_code=-15, reason="stopped")
    store.update_experiment(exp, status=ExperimentStatus.STOPPED, reason="stopped", finished_at=1.0)
    again = store.reopen_experiment(exp[:6])
    assert again.status is ExperimentStatus.STARTING and again.reason is None and again.finished_at is None
    [replica] = store.list_replicas(exp)
    assert replica.state is ReplicaState.PENDING and replica.exit_code is None and replica.reason is None
    second = store.add_attempt(exp, kind="resume", checkpoint_step=7)
    assert (first, second) == (0, 1)
    got = store.attempts(exp)
    assert [(a["number"], a["kind"], a["status"], a["checkpoint_step"]) for a in got] == [
        (0, "start", "stopped", None),
        (1, "resume", "running", 7),
    ]


def test_the_repro_record_is_stored_apart_and_deleted_with_the_experiment(store: SqlStore) -> None:
    exp = store.create_experiment(name="e", project="p").id
    assert store.repro(exp) == {}
    record = {"git": {"commit": "abc", "diff": "+x\n"}, "packages": ["a==1"], "snapshot": {"files": 2}}
    store.set_repro(exp, record)
    assert store.repro(exp) == record
    store.add_attempt(exp, kind="start")
    store.delete_experiment(exp)
    other = store.create_experiment(name="f", project="p").id
    assert store.attempts(other) == []
