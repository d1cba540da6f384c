"""Statements through the database driver's own cursor, inside the SQLAlchemy connection's
transaction: the store's writes that every door shares (``store.db``: written once, run here by the
full store and through ``sqlite3`` by a supervisor), and the few statements run per row in bulk
(console lines, a summary's buckets) or per chart read, where SQLAlchemy's per-row parameter
processing, compiling and row objects cost more than the database's own work (a console line's
insert: 6.6 µs through SQLAlchemy, most of it building parameters). SQL text with ``?``
placeholders, turned into ``%s`` for PostgreSQL (psycopg)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection


class DriverDb:
    """``store.db.Db`` on the driver connection of ``conn`` (in its transaction)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.dialect = conn.dialect.name

    def _cursor_and_sql(self, sql: str) -> tuple[Any, str]:
        raw = self._conn.connection.driver_connection
        assert raw is not None
        if self.dialect == "postgresql":
            sql = sql.replace("?", "%s")
        return raw.cursor(), sql

    def fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        cur, sql = self._cursor_and_sql(sql)
        try:
            cur.execute(sql, params)
            return list(cur.fetchall())
        finally:
            cur.close()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        cur, sql = self._cursor_and_sql(sql)
        try:
            cur.execute(sql, params)
            return int(cur.rowcount)
        finally:
            cur.close()

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        cur, sql = self._cursor_and_sql(sql)
        try:
            cur.executemany(sql, rows)
        finally:
            cur.close()

    def json(self, value: Any) -> Any:
        """As SQLAlchemy's JSON type binds it: its text on SQLite, a ``json`` value for psycopg."""
        if self.dialect == "postgresql":
            from psycopg.types.json import Json  # why: the PostgreSQL driver, an optional extra

            return Json(value)
        return json.dumps(value)


def fetch(conn: Connection, sql: str, params: tuple[Any, ...]) -> list[Any]:
    """The rows ``sql`` answers for ``params``."""
    return DriverDb(conn).fetch(sql, params)
