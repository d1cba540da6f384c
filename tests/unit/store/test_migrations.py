"""Schema changes go through Alembic: the migrated schema must equal the ORM models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from phalanx.store.migrations import HEAD
from phalanx.store.sql import SqlStore
from phalanx.store.sql.engine import head_revision
from phalanx.store.sql.models import Base


def test_migrated_schema_matches_the_models(store: SqlStore) -> None:
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(context, Base.metadata)
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
