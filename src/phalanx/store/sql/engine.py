"""Engines for the SQL store: SQLite tuned for one writer at a time plus many readers (WAL), or
PostgreSQL; and the schema brought to the latest Alembic revision when a store is opened.

SQLite: the driver's own transaction handling is switched off so that writes start with
``BEGIN IMMEDIATE`` (take the write lock up front: no deadlock between two upgrading readers) while
reads start with a plain ``BEGIN`` and never block a writer (WAL).

A SQLite database file is its owner's alone (``store.private_file``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url

from phalanx import knobs
from phalanx.errors import StoreError, UsageError
from phalanx.extras import require
from phalanx.store.migrations import HEAD
from phalanx.store.private_file import create_private, tighten

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 120_000


def normalize_url(url: str) -> str:
    """Accept postgres:// and postgresql:// and pick the psycopg 3 driver we ship."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


def make_engine(url: str) -> Engine:
    """An engine for ``url`` (sqlite:///path or postgresql+psycopg://...). UsageError if unknown."""
    url = normalize_url(url)
    try:
        parsed = make_url(url)
    except Exception as exc:  # sqlalchemy raises ArgumentError with a terse message
        raise UsageError(
            f"PHALANX_DB_URL {url!r} is not a database URL; use sqlite:///PATH or postgresql://..."
        ) from exc
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(url, parsed.database)
    if backend == "postgresql":
        require("psycopg", "postgres", "a PostgreSQL store (PHALANX_DB_URL)")
        return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)
    raise UsageError(f"unsupported database {backend!r} in PHALANX_DB_URL; use sqlite or postgresql")


def _sqlite_engine(url: str, database: str | None) -> Engine:
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
        if not database.startswith("file:"):  # (a URI's file is the user's to make)
            create_private(Path(database))
            tighten(Path(database))
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False})
    file_backed = bool(database) and database != ":memory:"
    cache_kib = knobs.SQLITE_CACHE_KIB.value()  # read once: a bad value is refused here, not per connection

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (see module docstring)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")  # first: what follows may wait for a lock
        if file_backed:
            _switch_to_wal(cur)
        cur.execute("PRAGMA synchronous=NORMAL")  # durable against process crashes; WAL keeps it fast
        cur.execute(f"PRAGMA cache_size=-{cache_kib}")  # a batch of points fits: no spill mid-transaction
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "")
        conn.exec_driver_sql(f"BEGIN {mode}".strip())

    return engine


def _switch_to_wal(cur: Any) -> None:
    """Put the file in WAL mode (a property of the file: once switched, there is nothing to do).

    Switching takes the file's write lock, and SQLite runs no busy handler for it: while another
    connection holds that lock in rollback mode (another process switching the same new file, or
    creating its tables) ``PRAGMA journal_mode=WAL`` fails at once with "database is locked",
    whatever the busy timeout (CI: two `phalanx run` on a fresh home). So it is retried, backing off,
    within the busy timeout; someone else finishing the switch meanwhile ends the wait too."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            mode = str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            if mode == "wal" or str(cur.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower() == "wal":
                return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() >= deadline:
                raise
        if time.monotonic() >= deadline:  # the switch kept answering the old mode
            raise sqlite3.OperationalError("database is locked (the switch to WAL mode never succeeded)")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class CommitWatch:
    """Whether anything was committed to a SQLite store since a count was taken, for a few µs:
    SQLite's ``PRAGMA data_version`` on a read-only connection of the watch's own, which changes
    with every commit of any other connection, of this process or another. ``count`` is None where
    no such counter exists (PostgreSQL, an in-memory database): ask the store then."""

    def __init__(self, engine: Engine) -> None:
        database = engine.url.database if engine.dialect.name == "sqlite" else None
        self._uri = (
            f"{Path(database).resolve().as_uri()}?mode=ro" if database and database != ":memory:" else None
        )
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # the server asks from its event loop and from route threads

    def count(self) -> int | None:
        if self._uri is None:
            return None
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = sqlite3.connect(
                        self._uri, uri=True, isolation_level=None, check_same_thread=False
                    )
                return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error:
                return None  # cannot tell: the caller asks the store itself

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def writer(engine: Engine) -> Engine:
    """The same engine, but SQLite transactions take the write lock at BEGIN."""
    if engine.dialect.name == "sqlite":
        return engine.execution_options(sqlite_begin="IMMEDIATE")
    return engine


# --- migrations --------------------------------------------------------------------------------


def head_revision() -> str:
    from alembic.script import ScriptDirectory  # why: Alembic only when the schema is behind

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def alembic_config() -> Any:
    from alembic.config import Config  # why: Alembic only when the schema is behind

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).resolve().parents[1] / "migrations"))
    return cfg


def _current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        try:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except Exception:
            return None


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    """Only one process upgrades a database at a time (two `phalanx` commands on a fresh home)."""
    if engine.dialect.name == "sqlite":
        database = engine.url.database
        if not database or database == ":memory:":
            yield
            return
        with open(f"{database}.migrate.lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
    else:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(74231)"))
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(74231)"))
                conn.commit()


def upgrade(engine: Engine) -> None:
    """Bring the schema to the latest revision (a no-op, without importing Alembic, when it is)."""
    if _current_revision(engine) == HEAD:
        return
    from alembic import command  # why: Alembic only when the schema is behind

    with _migration_lock(engine):
        if _current_revision(engine) == HEAD:
            return
        log.info("upgrading the store schema at %s", engine.url.render_as_string(hide_password=True))
        cfg = alembic_config()
        try:
            with writer(engine).begin() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
        except Exception as exc:
            raise StoreError(f"cannot upgrade the store schema: {exc}") from exc
