"""Exactly-once keys are per experiment: (experiment, stream, seq). A writer that reuses another
experiment's stream id cannot make that experiment's records count as already stored, and a store
upgraded from before (keys without an experiment) still skips a batch retried across the upgrade."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import text

from phalanx.domain import Event, EventKind
from phalanx.store.migrations import HEAD
from phalanx.store.sql import SqlStore
from phalanx.store.sql.engine import alembic_config, make_engine, writer
from tests.support import postgres


def _log(exp: str, seq: int, line: str, stream: str = "host-1-abcd") -> Event:
    return Event(exp, EventKind.LOG, {"lines": [line]}, stream=stream, seq=seq, time=time.time())


def test_another_experiment_using_the_same_stream_and_seq_does_not_hide_records(store: SqlStore) -> None:
    a = store.create_experiment(name="a", project="p")
    b = store.create_experiment(name="b", project="p")
    # A's writer got hold of B's stream id and sent records under it first
    assert store.write_events([_log(a.id, 0, "from a"), _log(a.id, 1, "from a")]) == 2
    # B's own records with those keys are B's, and stored
    assert store.write_events([_log(b.id, 0, "b line 0"), _log(b.id, 1, "b line 1")]) == 2
    assert [line.text for line in store.logs(b.id)] == ["b line 0", "b line 1"]
    # exactly once still holds per experiment: re-sent batches add nothing
    assert store.write_events([_log(b.id, 0, "b line 0"), _log(b.id, 1, "b line 1")]) == 0
    assert store.write_events([_log(a.id, 1, "from a"), _log(a.id, 2, "a line 2")]) == 1
    assert [line.text for line in store.logs(a.id)] == ["from a", "from a", "a line 2"]
    assert len(store.logs(b.id)) == 2


def _migrate(url: str, revision: str) -> None:
    from alembic import command

    engine = make_engine(url)
    cfg = alembic_config()
    with writer(engine).begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
    engine.dispose()


def _url(kind: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'old.db'}"
    reason = postgres.unavailable_reason()
    if reason:
        pytest.skip(reason)
    return postgres.shared_postgres().create_database()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_store_with_data_from_revision_0004_upgrades_and_stays_exactly_once(
    kind: str, tmp_path: Path
) -> None:
    url = _url(kind, tmp_path)
    _migrate(url, "0004_requeue")
    engine = make_engine(url)
    with writer(engine).begin() as conn:  # what a 0004 store holds after ingesting two log lines
        conn.execute(
            text(
                "INSERT INTO experiments (id, name, project, status, tags, topology, plan, created_at) "
                "VALUES ('old000000001', 'old', 'p', 'running', '[]', '{}', '{}', 1.0)"
            )
        )
        for seq in (0, 1):
            conn.execute(text("INSERT INTO event_keys (stream, seq) VALUES ('host-1-abcd', :s)"), {"s": seq})
            conn.execute(
                text(
                    'INSERT INTO logs (experiment_id, replica, "offset", stream, text, time) '
                    "VALUES ('old000000001', 'master', :s, 'stdout', :t, 1.0)"
                ),
                {"s": seq, "t": f"old line {seq}"},
            )
    engine.dispose()

    store = SqlStore(url)  # opening it upgrades it
    try:
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD
            keys = conn.execute(text("SELECT stream, seq, experiment_id FROM event_keys ORDER BY seq")).all()
        assert [tuple(k) for k in keys] == [("host-1-abcd", 0, ""), ("host-1-abcd", 1, "")]
        assert store.event_count("host-1-abcd") == 2
        # the batch in flight during the upgrade is re-sent: its stored records are not doubled
        batch = [_log("old000000001", 1, "old line 1"), _log("old000000001", 2, "new line 2")]
        assert store.write_events(batch) == 1
        assert store.write_events(batch) == 0
        lines = [line.text for line in store.logs("old000000001")]
        assert lines == ["old line 0", "old line 1", "new line 2"]
        # a new experiment on the upgraded store gets keys of its own
        fresh = store.create_experiment(name="new", project="p")
        assert store.write_events([_log(fresh.id, 5, "x", stream="s-new")]) == 1
        assert store.write_events([_log(fresh.id, 5, "x", stream="s-new")]) == 0
        assert store.event_count("host-1-abcd") == 3
    finally:
        store.close()
