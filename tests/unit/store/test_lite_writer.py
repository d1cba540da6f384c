"""The lean writer (a supervisor's store without SQLAlchemy, issue 42) writes the rows the full
store writes: the same calls on both, in two stores, leave the same tables; what it hands on to
the full store is written there, once."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from phalanx.config import Settings
from phalanx.domain import Event, EventKind, ExperimentStatus, Replica, ReplicaState, Role
from phalanx.errors import Conflict, NotFound, UsageError
from phalanx.store import open_store
from phalanx.store.alerts import alert_book
from phalanx.store.base import LocalStore
from phalanx.store.lite_writer import LiteWriter
from phalanx.store.migrations import HEAD
from phalanx.store.run_store import RunStore

EXP = "abc123def456"
# what a clock writes (the store's own time.time()): not compared
CLOCKED = {("attempts", "finished_at"), ("ingest_positions", "updated_at")}


@pytest.fixture
def homes(tmp_path: Path) -> Iterator[tuple[LocalStore, LiteWriter, LocalStore]]:
    """The full store of one home; the lean writer of another, and that home's full store."""
    full = open_store(Settings(home=tmp_path / "full"))
    beside = open_store(Settings(home=tmp_path / "lite"))
    lite = LiteWriter.open(Settings(home=tmp_path / "lite").database_url, HEAD, lambda: beside)
    assert lite is not None
    try:
        yield full, lite, beside
    finally:
        lite.close()
        full.close()
        beside.close()


def _run(store: RunStore) -> None:
    """What a supervisor records of a two-replica run that reports."""
    replicas = [
        Replica("", "master", Role.MASTER, 0, 0, resources={"cpu": {"requests": 1}}),
        Replica("", "worker-0", Role.WORKER, 0, 1),
    ]
    store.create_experiment(
        name="mnist",
        project="vision",
        replicas=replicas,
        experiment_id=EXP,
        framework="pytorch",
        backend="local",
        tags=["a", "b"],
        topology={"master": 1, "worker": 1},
        spec_text="version: 1\n",
        plan={"command": "python train.py", "n": [1, 2]},
        status=ExperimentStatus.STARTING,
        created_at=100.0,
    )
    store.add_attempt(EXP, kind="start", started_at=101.0)
    store.update_experiment(EXP, status=ExperimentStatus.RUNNING, started_at=101.5, handle="h:0")
    store.update_replica(
        EXP, "master", state=ReplicaState.RUNNING, host="127.0.0.1", pid=42, started_at=102.0
    )
    store.set_repro(EXP, {"python": "3.11", "packages": ["x==1"]})
    events = [
        Event(EXP, EventKind.LOG, {"lines": ["epoch 1", "epoch 2"]}, stream="s1", seq=0, time=103.0),
        Event(EXP, EventKind.PARAM, {"section": "Args", "values": {"lr": 0.1, "n": 3}}, stream="s1", seq=1),
        Event(
            EXP,
            EventKind.SCALAR,
            {"points": [["loss", "rank 0", i, 1.0 / (i + 1), 103.0 + i] for i in range(40)]},
            stream="s1",
            seq=2,
        ),
        Event(
            EXP,
            EventKind.SCALAR,
            {"points": [["system/cpu", "master", 0, 5.0, 104.0]]},
            replica="master",
            stream="s2",
            seq=0,
        ),
    ]
    assert store.ingest_batch("s1", 0, 100, 2, events[:3]) == 3
    assert store.ingest_batch("s1", 0, 100, 2, events[:3]) is None  # another ingester got there first
    assert store.ingest_batch("s1", 100, 150, 3, events[:3]) == 0  # a retried batch: nothing twice
    more = [
        Event(EXP, EventKind.SCALAR, {"points": [["loss", "rank 0", 40, 0.01, 150.0]]}, stream="s1", seq=3)
    ]
    assert store.ingest_batch("s1", 150, 180, 3, more) == 1  # joins the series' last, small chunk
    assert store.ingest_batch("s2", 0, 60, 0, events[3:]) == 1
    assert store.ingest_position("s1") == (180, 3)
    store.notice(EXP, "stalled", "worker-0", "stalled: worker-0 silent for 60 s")
    store.notice(EXP, "straggling", "worker-0", "straggling")
    store.update_replica(EXP, "master", state=ReplicaState.SUCCEEDED, exit_code=0, finished_at=110.0)
    store.update_replica(EXP, "worker-0", state=ReplicaState.RUNNING, fresh=True)
    store.finish_attempt(EXP, 0, status=ExperimentStatus.SUCCEEDED)
    store.update_experiment(EXP, status=ExperimentStatus.SUCCEEDED, finished_at=111.0)


def _tables(store_file: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows as stored (types included), without what a clock wrote."""
    conn = sqlite3.connect(store_file)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        out = {}
        for table in names:
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            keep = [c for c in columns if (table, c) not in CLOCKED]
            picked = ", ".join(f'"{c}", typeof("{c}")' for c in keep)
            out[table] = sorted(conn.execute(f"SELECT {picked} FROM {table}").fetchall(), key=repr)
        return out
    finally:
        conn.close()


def test_a_run_recorded_by_the_lean_writer_leaves_the_full_stores_rows(
    homes: tuple[LocalStore, LiteWriter, LocalStore], tmp_path: Path
) -> None:
    full, lite, _ = homes
    _run(full)
    _run(lite)
    written, expected = _tables(tmp_path / "lite" / "phalanx.db"), _tables(tmp_path / "full" / "phalanx.db")
    assert written["scalar_chunks"] and written["scalar_summary"] and written["logs"]  # it reported
    assert written == expected
    assert lite.get_experiment(EXP) == full.get_experiment(EXP)
    assert lite.last_points(EXP, "loss", 3) == full.last_points(EXP, "loss", 3)
    assert lite.series_replicas(EXP, "loss") == full.series_replicas(EXP, "loss")
    assert lite.metric_titles(EXP) == full.metric_titles(EXP)
    assert lite.list_replicas(EXP) == full.list_replicas(EXP)
    unclocked = [{k: v for k, v in a.items() if k != "finished_at"} for a in full.attempts(EXP)]
    assert [{k: v for k, v in a.items() if k != "finished_at"} for a in lite.attempts(EXP)] == unclocked
    assert lite.repro(EXP) == full.repro(EXP)


def test_the_lean_writer_refuses_what_the_full_store_refuses(
    homes: tuple[LocalStore, LiteWriter, LocalStore],
) -> None:
    _, lite, _ = homes
    lite.create_experiment(name="x", project="p", experiment_id=EXP)
    with pytest.raises(Conflict, match="already exists"):
        lite.create_experiment(name="x", project="p", experiment_id=EXP)
    with pytest.raises(UsageError, match="name"):
        lite.create_experiment(name="x" * 300, project="p")
    with pytest.raises(NotFound, match="no replica 'ghost'"):
        lite.update_replica(EXP, "ghost", state=ReplicaState.RUNNING)
    with pytest.raises(NotFound):
        lite.update_experiment("fedcba987654", status=ExperimentStatus.RUNNING)
    with pytest.raises(UsageError, match="give one of"):
        lite.notice(EXP, "bored", None, "")
    with pytest.raises(UsageError):  # a malformed event: nothing of the batch is written
        lite.ingest_batch(
            "s", 0, 10, 1, [Event(EXP, EventKind.PARAM, {"values": {"k" * 300: 1}}, stream="s")]
        )
    huge = [Event(EXP, EventKind.SCALAR, {"points": [["loss", "m", 2**64, 1.0, 1.0]]}, stream="s")]
    with pytest.raises(UsageError, match="64 bits"):  # as the full store says it
        lite.ingest_batch("s", 0, 10, 0, huge)
    assert lite.ingest_position("s") == (0, -1)


def _handed_on(beside: LocalStore) -> Callable[[], LocalStore]:
    opened: list[LocalStore] = []

    def full() -> LocalStore:
        opened.append(beside)
        return beside

    full.opened = opened  # type: ignore[attr-defined]
    return full


def test_what_the_lean_writer_does_not_write_itself_the_full_store_writes_once(tmp_path: Path) -> None:
    """Artifacts, a later attempt's points, an end the project's alert hooks hear of: the full store
    (opened only then) writes them, in the same exactly-once batches."""
    settings = Settings(home=tmp_path)
    beside = open_store(settings)
    full = _handed_on(beside)
    lite = LiteWriter.open(settings.database_url, HEAD, full)
    assert lite is not None
    try:
        lite.create_experiment(
            name="x", project="p", experiment_id=EXP, replicas=[Replica("", "master", Role.MASTER, 0, 0)]
        )
        plain = [Event(EXP, EventKind.LOG, {"lines": ["a"]}, stream="s", seq=0)]
        assert lite.ingest_batch("s", 0, 10, 0, plain) == 1
        assert full.opened == []  # type: ignore[attr-defined]
        resumed = [
            Event(
                EXP, EventKind.SCALAR, {"points": [["loss", "m", 5, 1.0, 1.0]]}, stream="s", seq=1, attempt=1
            )
        ]
        text = [Event(EXP, EventKind.TEXT, {"title": "note", "text": "hi"}, stream="s", seq=2)]
        assert lite.ingest_batch("s", 10, 20, 1, resumed) == 1
        assert lite.ingest_batch("s", 20, 30, 2, text) == 1
        assert lite.ingest_batch("s", 20, 30, 2, text) is None  # the position moved with it
        assert beside.metrics(EXP, "loss")["loss"]["m"].steps == [5]
        assert [t["text"] for t in beside.texts(EXP)] == ["hi"]
        assert lite.ingest_position("s") == (30, 2)
        alert_book(beside).add_hook("p", "http://127.0.0.1:9/hook", ["failed", "stalled"], None, None)
        lite.notice(EXP, "stalled", "master", "stalled: master silent")
        lite.update_experiment(EXP, status=ExperimentStatus.FAILED, reason="boom", finished_at=5.0)
        assert lite.get_experiment(EXP).status is ExperimentStatus.FAILED
        conn = sqlite3.connect(tmp_path / "phalanx.db")
        try:
            deliveries = conn.execute("SELECT event FROM alert_deliveries").fetchall()
        finally:
            conn.close()
        assert sorted(deliveries) == [("experiment.failed",), ("experiment.stalled",)]  # once each
    finally:
        lite.close()
        beside.close()


def test_the_lean_writer_opens_only_an_up_to_date_sqlite_file(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    never: Callable[[], LocalStore] = lambda: pytest.fail("opened the full store")  # noqa: E731
    assert (
        LiteWriter.open(settings.database_url, HEAD, never) is None
    )  # no file yet: the full store creates it
    assert LiteWriter.open("postgresql://db/phalanx", HEAD, never) is None
    open_store(settings).close()
    assert LiteWriter.open(settings.database_url, "0000_older", never) is None  # the full store migrates
    lite = LiteWriter.open(settings.database_url, HEAD, never)
    assert lite is not None
    lite.close()
