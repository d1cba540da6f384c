"""Schema changes go through Alembic: the migrated schema must equal the ORM models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from phalanx.store.migrations import HEAD
from phalanx.store.sql import SqlStore
from phalanx.store.sql.engine import head_revision
from phalanx.store.sql.models import metadata


def test_migrated_schema_matches_the_models(store: SqlStore) -> None:
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(context, metadata)
    assert diff == []


def test_head_constant_names_the_newest_migration() -> None:
    assert head_revision() == HEAD


def test_opening_a_store_twice_migrates_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    SqlStore(url).close()
    again = SqlStore(url)
    with again.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() == HEAD
    again.close()


def test_a_store_migrated_from_0004_keeps_the_attempt_state_of_each_replica(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """0005 keeps per (series, replica) what 0004 kept per series: a later attempt still replaces,
    an older one arriving late is still dropped."""
    from alembic import command
    from sqlalchemy import create_engine, text

    from phalanx.store.sql.engine import alembic_config

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    engine = create_engine(url)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0004_requeue")
        conn.execute(
            text(
                "INSERT INTO series (id, experiment_id, title, series, attempt, attempt_step)"
                " VALUES (1, 'e', 'loss', 'a', 1, 5), (2, 'e', 'loss', 'b', NULL, NULL)"
            )
        )
        conn.execute(text("INSERT INTO scalars (series_id, step, value, time, replica) VALUES"
                          " (1, 4, 0, 0, 'master'), (1, 5, 0, 0, 'master'), (1, 6, 0, 0, 'worker-0'),"
                          " (2, 0, 0, 0, 'master')"))  # fmt: skip
    engine.dispose()
    store = SqlStore(url)
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT series_id, replica, attempt, attempt_step FROM series_attempts"))
        assert sorted(tuple(r) for r in rows) == [(1, "master", 1, 5), (1, "worker-0", 1, 5)]
    store.close()


def test_a_parameters_value_reads_back_as_reported_and_one_stored_before_0021_as_it_became(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SQLite turned a value's text that looked like a number into one (1.0 -> 1, a 20-digit integer
    -> a rounded real): since 0021 each reads back as reported; one stored before keeps its number."""
    from alembic import command
    from sqlalchemy import create_engine, text

    from phalanx.domain import Event, EventKind
    from phalanx.store.sql.engine import alembic_config

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    engine = create_engine(url)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0020_registry_last_version")
        conn.execute(
            text(
                "INSERT INTO experiments (id, name, project, status, tags, topology, plan, created_at)"
                " VALUES ('e', 'n', 'p', 'succeeded', '[]', '{}', '{}', 0)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO params (experiment_id, section, key, value, replica, rank, time) VALUES"
                " ('e', 'Args', 'old', '1.0', 'master', 0, 0),"
                " ('e', 'Args', 'real', '0.30000000000000004', 'master', 0, 0),"
                " ('e', 'Args', 'huge', '12345678901234567890', 'master', 0, 0)"
            )
        )
    engine.dispose()
    store = SqlStore(url)
    values = {"lr": 1.0, "big": 12345678901234567890, "neg": -0.0, "sci": 3e5, "s": "1", "b": True, "n": None}
    store.write_events(
        [
            Event(
                "e",
                EventKind.PARAM,
                {"section": "Args", "key": k, "value": v},
                time=1.0 + i,
                stream="s",
                seq=i,
            )
            for i, (k, v) in enumerate(values.items())
        ]
    )
    read = {p.key: p.value for p in store.params("e")}
    # stored as numbers before: each stays exactly the number it became (not 15 digits of it)
    assert (read.pop("old"), read.pop("real"), read.pop("huge")) == (
        1,
        0.30000000000000004,
        1.2345678901234567e19,
    )
    assert read == values
    assert [type(read[k]) for k in ("lr", "big", "neg", "sci")] == [float, int, float, float]
    assert str(read["neg"]) == "-0.0"
    with store.engine.connect() as conn:  # the copied table keeps its index
        indexes = conn.execute(text("SELECT name FROM sqlite_master WHERE tbl_name = 'params'")).scalars()
        assert "ix_params_experiment" in set(indexes)
    store.close()
