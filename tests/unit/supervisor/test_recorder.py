"""Recorder: the experiment's rows, written by its supervisor alone: created or found, each replica's
state as it changes (a store that cannot be reached is said once and retried), the outcome (kept in
the spool when the store stays away), and the console's spool removed once ingested."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from phalanx.backends.base import JobStatus, ReplicaStatus
from phalanx.config import Settings
from phalanx.domain import ExperimentStatus, ReplicaState
from phalanx.errors import BackendUnavailable
from phalanx.ingest import Ingester
from phalanx.spec.model import ExperimentSpec, Topology
from phalanx.spool import SpoolWriter
from phalanx.store.sql import SqlStore
from phalanx.supervisor import recording
from phalanx.supervisor.opener import LazyStore
from phalanx.supervisor.outcome import Outcome
from phalanx.supervisor.preparing import Prepared, prepare
from phalanx.supervisor.recording import Recorder, record_building, replicas_of
from tests.support.scripted import VirtualClock
from tests.unit.supervisor.fakes import FakeObserver, spooled

RUNNING = ExperimentStatus.RUNNING


@pytest.fixture
def prepared(settings: Settings, tmp_path: Path) -> Prepared:
    spec = ExperimentSpec(
        version=1, kind="experiment", command=("python train.py",), topology=Topology(n_workers=1)
    )
    return prepare(spec, settings=settings, workdir=tmp_path, experiment_id="e1", dry=True)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    """The recorder's time: its retries' seconds pass at once, and can be read."""
    virtual = VirtualClock()
    monkeypatch.setattr(recording, "time", virtual)
    return virtual


class FakeFlakyStore:
    """The real store, but its writes fail while ``down`` (the database went away)."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.down = False

    def __getattr__(self, name: str) -> Any:
        if self.down and name.startswith("update_"):
            raise ConnectionError("the database is down")
        return getattr(self.store, name)


class FakeRestartingDatabase:
    """The real store, whose next ``failures`` writes fail as they do while PostgreSQL restarts
    (``committed``: each is made, but its answer is lost with the connection)."""

    def __init__(self, store: SqlStore, failures: int, committed: bool = False) -> None:
        self.store = store
        self.failures = failures
        self.committed = committed

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)
        if not name.startswith(("update_", "create_")):
            return method

        def write(*args: Any, **kwargs: Any) -> Any:
            if self.failures:
                self.failures -= 1
                if self.committed:
                    method(*args, **kwargs)
                raise BackendUnavailable("the database failed: server closed the connection unexpectedly")
            return method(*args, **kwargs)

        return write


def recorder(
    prepared: Prepared, store: Any, observer: FakeObserver, settings: Settings, **kw: Any
) -> Recorder:
    spool_dir = settings.spool_dir / prepared.experiment_id
    return Recorder(
        prepared.experiment_id,
        replicas_of(prepared),
        LazyStore(store),
        observer,
        elapsed=lambda: 1.5,
        spool_dir=spool_dir,
        **kw,
    )


def job(*states: tuple[str, ReplicaState], host: str | None = "here") -> JobStatus:
    return JobStatus(RUNNING, tuple(ReplicaStatus(n, s, host, pid=7) for n, s in states))


def test_the_row_is_created_once_with_its_replicas(
    prepared: Prepared, store: SqlStore, observer: FakeObserver, settings: Settings
) -> None:
    rows = recorder(prepared, store, observer, settings)
    assert not rows.created
    rows.create(prepared)
    assert rows.created
    exp = store.get_experiment("e1")
    assert exp.status is ExperimentStatus.STARTING and exp.backend == "local"
    assert exp.plan["launch"]["commands"]["worker-0"].endswith("python train.py")
    assert {r.name: r.state for r in store.list_replicas("e1")} == {
        "master": ReplicaState.PENDING,
        "worker-0": ReplicaState.PENDING,
    }
    rows.withdraw("refused")  # by the machine's queue, before it ran: nothing half-written
    assert not rows.created and store.list_experiments().items == []


def test_building_records_the_row_first(prepared: Prepared, store: SqlStore, settings: Settings) -> None:
    record_building(prepared, store)
    assert store.get_experiment("e1").status is ExperimentStatus.BUILDING
    assert recorder(prepared, store, FakeObserver(), settings, exists=True).created


def accepted_row(prepared: Prepared, store: SqlStore) -> None:
    """The row the server's submit wrote (status created, the plan without how it was launched)."""
    recording.create_experiment(store, prepared, ExperimentStatus.CREATED)
    store.update_experiment("e1", plan=prepared.plan.to_json())
    assert "launch" not in store.get_experiment("e1").plan


def test_a_row_the_server_accepted_says_building_with_its_launch(prepared: Prepared, store: SqlStore) -> None:
    accepted_row(prepared, store)
    record_building(prepared, store, accepted=True)  # a second create would fail: the id is taken
    exp = store.get_experiment("e1")
    assert exp.status is ExperimentStatus.BUILDING and "launch" in exp.plan
    assert len(store.list_experiments().items) == 1


def test_a_row_the_server_accepted_says_starting_with_its_launch(
    prepared: Prepared, store: SqlStore, observer: FakeObserver, settings: Settings
) -> None:
    accepted_row(prepared, store)
    rows = recorder(prepared, store, observer, settings, exists=True)
    assert rows.created
    rows.started(prepared)  # its first group started: the accepted row says so
    exp = store.get_experiment("e1")
    assert exp.status is ExperimentStatus.STARTING
    assert exp.plan["launch"]["commands"]["worker-0"].endswith("python train.py")


@pytest.mark.usefixtures("clock")
def test_the_status_of_an_accepted_experiment_is_written_through_a_database_restart(
    prepared: Prepared, store: SqlStore, observer: FakeObserver, settings: Settings
) -> None:
    accepted_row(prepared, store)
    restarting = FakeRestartingDatabase(store, failures=3)
    rows = recorder(prepared, restarting, observer, settings, exists=True)
    rows.started(prepared)  # the server answered its submit: it runs, the database back or not
    assert store.get_experiment("e1").status is ExperimentStatus.STARTING
    restarting.failures = 2
    rows.status(RUNNING, handle="h")
    assert store.get_experiment("e1").status is RUNNING


def test_a_database_that_stays_away_fails_the_write_after_the_retry_time(
    prepared: Prepared, store: SqlStore, observer: FakeObserver, settings: Settings, clock: VirtualClock
) -> None:
    accepted_row(prepared, store)
    rows = recorder(prepared, FakeRestartingDatabase(store, failures=10**6), observer, settings, exists=True)
    start = clock.monotonic()
    with pytest.raises(BackendUnavailable):
        rows.status(RUNNING)
    # virtual seconds (no wall clock): PHALANX_STORE_RETRY_SECONDS of retries, then the last try
    assert 30 <= clock.monotonic() - start < 36


def test_a_database_away_at_a_running_groups_status_write_does_not_stop_supervision(
    prepared: Prepared, store: SqlStore, observer: FakeObserver, settings: Settings, clock: VirtualClock
) -> None:
    """A database that went away just as the supervisor wrote 'running' failed an experiment whose
    replicas ran (CI: PostgreSQL stopped while that write's answer was on its way): the write is
    given up after the retries, said once, and the outcome records how it ended."""
    accepted_row(prepared, store)
    away = FakeRestartingDatabase(store, failures=10**6)
    rows = recorder(prepared, away, observer, settings, exists=True)
    rows.status_while_running(RUNNING, handle="h")  # returns after the retries (virtual seconds)
    assert observer.messages == [
        "the store cannot be reached (BackendUnavailable: the database failed: server closed the "
        "connection unexpectedly); retrying"
    ]
    rows.status_while_running(ExperimentStatus.PENDING, reason="waiting for a node")
    away.failures = 0  # back
    rows.status_while_running(RUNNING, reason="")
    assert store.get_experiment("e1").status is RUNNING


@pytest.mark.usefixtures("clock")
def test_a_row_whose_creation_answer_was_lost_is_created_once(
    prepared: Prepared, store: SqlStore, observer: FakeObserver, settings: Settings
) -> None:
    rows = recorder(prepared, FakeRestartingDatabase(store, failures=1, committed=True), observer, settings)
    rows.create(prepared)  # a second insert would clash with the first, which was made
    assert rows.created
    assert [e.id for e in store.list_experiments().items] == ["e1"]


def test_only_changed_states_are_written_and_shown(
    prepared: Prepared, store: SqlStore, observer: FakeObserver, settings: Settings
) -> None:
    rows = recorder(prepared, store, observer, settings)
    rows.create(prepared)
    rows.record(job(("master", ReplicaState.PENDING), ("worker-0", ReplicaState.PENDING), host=None))
    rows.record(job(("master", ReplicaState.RUNNING), ("worker-0", ReplicaState.PENDING), host=None))
    rows.record(job(("master", ReplicaState.RUNNING), ("worker-0", ReplicaState.PENDING), host=None))
    replicas = {r.name: r for r in store.list_replicas("e1")}
    assert replicas["master"].state is ReplicaState.RUNNING and replicas["master"].started_at is not None
    assert replicas["worker-0"].started_at is None  # still waiting for a node: not started
    assert observer.shown == [
        {"master": ReplicaState.PENDING, "worker-0": ReplicaState.PENDING},
        {"master": ReplicaState.RUNNING, "worker-0": ReplicaState.PENDING},
    ]  # the third poll changed nothing


def test_a_store_that_cannot_be_reached_is_said_once_and_the_row_is_written_later(
    prepared: Prepared, store: SqlStore, observer: FakeObserver, settings: Settings
) -> None:
    flaky = FakeFlakyStore(store)
    rows = recorder(prepared, flaky, observer, settings)
    rows.create(prepared)
    flaky.down = True
    rows.record(job(("master", ReplicaState.RUNNING)))
    rows.record(job(("master", ReplicaState.RUNNING)))
    assert observer.messages == [
        "the store cannot be reached (ConnectionError: the database is down); retrying"
    ]
    flaky.down = False
    rows.record(job(("master", ReplicaState.RUNNING)))  # the next poll
    assert {r.name: r.state for r in store.list_replicas("e1")}["master"] is ReplicaState.RUNNING


def test_the_outcome_ends_unfinished_replicas_and_wakes_the_watcher(
    prepared: Prepared, store: SqlStore, observer: FakeObserver, settings: Settings, tmp_path: Path
) -> None:
    fifo = tmp_path / "wake"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the group's controller, waiting
    try:
        rows = recorder(prepared, store, observer, settings, notify=str(fifo))
        rows.create(prepared)
        rows.record(job(("master", ReplicaState.FAILED), ("worker-0", ReplicaState.RUNNING)))
        rows.finish(Outcome("e1", ExperimentStatus.FAILED, "master exited with code 3"))
        assert os.read(reader, 8) == b"."
    finally:
        os.close(reader)
    exp = store.get_experiment("e1")
    assert (exp.status, exp.reason) == (ExperimentStatus.FAILED, "master exited with code 3")
    assert exp.finished_at is not None
    states = {r.name: r.state for r in store.list_replicas("e1")}
    assert states == {"master": ReplicaState.FAILED, "worker-0": ReplicaState.STOPPED}


@pytest.mark.usefixtures("clock")
def test_an_outcome_the_store_cannot_take_is_kept_in_the_spool_for_the_next_reader(
    prepared: Prepared, store: SqlStore, observer: FakeObserver, settings: Settings
) -> None:
    flaky = FakeFlakyStore(store)
    rows = recorder(prepared, flaky, observer, settings)
    rows.create(prepared)
    flaky.down = True
    rows.finish(Outcome("e1", ExperimentStatus.SUCCEEDED))
    assert store.get_experiment("e1").status is ExperimentStatus.STARTING
    assert "the outcome is kept in" in observer.messages[-1]
    statuses = spooled(rows.spool_dir, "status")
    assert {(r["replica"], r["data"]["replica_state"]) for r in statuses} == {
        ("master", "succeeded"),
        ("worker-0", "succeeded"),
    }
    Ingester(store, None, rows.spool_dir).run_once()  # the next phalanx command
    assert store.get_experiment("e1").status is ExperimentStatus.SUCCEEDED


def test_the_console_spool_goes_once_every_line_is_ingested(
    prepared: Prepared, store: SqlStore, observer: FakeObserver, settings: Settings
) -> None:
    rows = recorder(prepared, store, observer, settings)
    rows.create(prepared)
    writer = SpoolWriter(rows.spool_dir, experiment_id="e1", stream="console-e1")
    writer.log("hello", replica="master")
    writer.close()
    discarded: list[bool] = []
    rows.tidy([writer], lambda: discarded.append(True), ingested=True)
    assert writer.path.exists() and discarded == []  # not ingested yet: the next ingester takes it
    Ingester(store, None, rows.spool_dir, cleanup=False).run_once()
    rows.tidy([writer], lambda: discarded.append(True), ingested=False)
    assert writer.path.exists()  # its ingester did not finish: nothing is removed
    rows.tidy([writer], lambda: discarded.append(True), ingested=True)
    assert not writer.path.exists() and discarded == [True] and not rows.spool_dir.exists()
    assert [line.text for line in store.logs("e1")] == ["hello"]
