"""A fresh SQLite store, migrated once per test session and copied for every unit test that opens one.

Opening a store on a new file runs every Alembic migration (an Alembic import, its scripts loaded,
some 70 DDL statements): 0.05 s alone, 0.2 s and more on the loaded CI machine, and several hundred
unit tests open a fresh store. The template is made by the product's own ``upgrade`` on a new file,
so each copy is exactly the database a migration would have produced; after the copy the product's
``upgrade`` still runs and finds the schema at HEAD. Only a file that does not exist yet (or is empty)
is served from the template: a database that a test set up itself (an old revision, a foreign file)
goes through the real migrations, and so do tests/integration (real processes, real migrations).
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine


class SchemaTemplate:
    """Made on first use, in ``folder``, by ``upgrade`` (the product's own migration runner)."""

    def __init__(self, folder: Path, upgrade: Callable[[Engine], None]) -> None:
        self._folder = folder
        self._upgrade = upgrade
        self._template: Path | None = None
        self.copies = 0

    def upgrade(self, engine: Engine) -> None:
        """Stands in for ``phalanx.store.sql.engine.upgrade``: a new SQLite file gets the template's
        bytes first; then the real ``upgrade`` runs (a no-op check of the revision when copied)."""
        database = _new_sqlite_file(engine)
        if database is not None:
            shutil.copyfile(self._made(), database)
            Path(f"{database}.migrate.lock").touch()  # the real migration leaves its lock file behind
            self.copies += 1
        self._upgrade(engine)

    def _made(self) -> Path:
        if self._template is None:
            from phalanx.store.sql.engine import make_engine

            path = self._folder / "phalanx.db"
            engine = make_engine(f"sqlite:///{path}")
            try:
                self._upgrade(engine)
            finally:
                engine.dispose()
            with sqlite3.connect(path) as conn:  # everything into the main file: no -wal to copy
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.close()
            self._template = path
        return self._template


def _new_sqlite_file(engine: Engine) -> Path | None:
    """The file of a SQLite engine that has no database yet, else None."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return None
    path = Path(database)
    if path.exists() and path.stat().st_size > 0:
        return None
    if Path(f"{database}-wal").exists():  # some connection is already writing to it
        return None
    return path
