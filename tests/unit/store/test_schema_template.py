"""The unit tests' fresh stores are copies of one migrated database (tests/unit/conftest.py): a copy
must be exactly what the migrations make of a new file, and a database a test set up itself must
still go through the real migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from phalanx.store.migrations import HEAD
from phalanx.store.sql import SqlStore
from phalanx.store.sql.engine import make_engine, upgrade
from tests.support.schema_template import SchemaTemplate


def _schema(path: Path) -> tuple[list[tuple[str, str, str]], str, str]:
    with sqlite3.connect(path) as conn:
        tables = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    conn.close()
    return tables, revision, mode


def test_a_copied_store_is_the_database_the_migrations_make(
    tmp_path: Path, _schema_template: SchemaTemplate
) -> None:
    migrated = tmp_path / "migrated.db"
    engine = make_engine(f"sqlite:///{migrated}")
    upgrade(engine)  # the product's own function, not the template's stand-in
    engine.dispose()
    before = _schema_template.copies
    SqlStore(f"sqlite:///{tmp_path / 'copied.db'}").close()
    assert _schema_template.copies == before + 1
    assert _schema(tmp_path / "copied.db") == _schema(migrated)
    assert _schema(migrated)[1:] == (HEAD, "wal")


def test_a_database_set_up_by_the_test_is_migrated_for_real(
    tmp_path: Path, _schema_template: SchemaTemplate
) -> None:
    path = tmp_path / "own.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE mine (x INTEGER)")
    conn.close()
    before = _schema_template.copies
    SqlStore(f"sqlite:///{path}").close()
    assert _schema_template.copies == before
    names = {row[1] for row in _schema(path)[0]}
    assert "mine" in names and "experiments" in names
