"""Statements on a database driver's own connection (DB-API), written once for every door into a
SQL store: the full store runs them through the driver connection inside its SQLAlchemy
transaction (``store.sql.driver.DriverDb``), a supervisor recording into a SQLite file through the
standard library's ``sqlite3`` (``SqliteDb``, ``store.lite_writer``), without importing SQLAlchemy
(issue 42: importing it was a third of a whole submission's CPU).

SQL text with ``?`` placeholders (``DriverDb`` turns them into ``%s`` for psycopg); a column named
like a keyword is quoted (``"offset"``). Standard library only.
"""

from __future__ import annotations

import contextlib
import gc
import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from phalanx.errors import BackendUnavailable, Conflict, PhalanxError, StoreError, UsageError


class Db(Protocol):
    """A connection inside a transaction its caller opened and commits."""

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        ...

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows ``sql`` answers for ``params``."""
        ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run ``sql`` once; the rows it changed."""
        ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """``sql`` once per row of ``rows``."""
        ...

    def json(self, value: Any) -> Any:
        """``value`` as the parameter of a JSON column."""
        ...


class SqliteDb:
    """``Db`` on a ``sqlite3`` connection."""

    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self._conn.execute(sql, params).fetchall()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._conn.execute(sql, params).rowcount

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self._conn.executemany(sql, rows)

    def json(self, value: Any) -> Any:
        return json.dumps(value)  # as SQLAlchemy's JSON type writes it on SQLite


def driver_error(exc: BaseException) -> PhalanxError | None:
    """The Phalanx error a database driver's exception means (``store.sql.errors`` says which);
    None when ``exc`` is not a driver's. An integer beyond 64 bits (SQLite's driver raises
    OverflowError binding it) is the caller's UsageError."""
    if isinstance(exc, OverflowError):
        return UsageError(
            f"a number is out of range for the database ({type(exc).__name__}); integers must fit in 64 bits"
        )
    if type(exc).__module__.split(".")[0] not in _DRIVERS:
        return None
    kinds = {k.__name__ for k in type(exc).__mro__}
    if "IntegrityError" in kinds:
        return Conflict(f"the change clashes with what is stored: {first_line(exc)}")
    if "DataError" in kinds:
        return UsageError(f"a value is out of range for the database: {first_line(exc)}")
    if "OperationalError" in kinds:
        return BackendUnavailable(f"the database failed: {first_line(exc)}; check that it runs, then retry")
    return StoreError(f"the store failed: {first_line(exc)}")


def driver_clash(exc: BaseException) -> str | None:
    """``IntegrityError`` or ``OperationalError`` when ``exc`` is a driver's of that kind (a write
    clash or a busy database, which a retried transaction may get past); None otherwise."""
    if type(exc).__module__.split(".")[0] in _DRIVERS:
        kinds = {k.__name__ for k in type(exc).__mro__}
        for kind in ("IntegrityError", "OperationalError"):
            if kind in kinds:
                return kind
    return None


def first_line(exc: BaseException) -> str:
    """The first line of what ``exc`` (or the driver's error it wraps) says."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_DRIVERS = {"sqlite3", "psycopg", "psycopg2"}
LEGACY_KEY = ""  # the experiment of an event key stored before migration 0006 (any experiment)


def marks(n: int) -> str:
    """``?, ?, ...``: ``n`` placeholders, for ``IN (...)``."""
    return ", ".join("?" * n)


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small tuples (rows to insert, rows
    read back): none of them can form a cycle, and collecting every 700 allocations over a million
    of them costs more than the work itself."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
