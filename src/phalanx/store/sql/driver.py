"""Statements through the database driver's own cursor, inside the SQLAlchemy connection's
transaction: for the few statements the store runs per row in bulk (console lines, a summary's
buckets) or per chart read, where SQLAlchemy's per-row parameter processing, compiling and row
objects cost more than the database's own work (a console line's insert: 6.6 µs through
SQLAlchemy, most of it building parameters). SQL text with ``?`` placeholders, turned into
``%s`` for PostgreSQL (psycopg); a column named like a keyword is quoted (``"offset"``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection


def _cursor_and_sql(conn: Connection, sql: str) -> tuple[Any, str]:
    raw = conn.connection.driver_connection
    assert raw is not None
    if conn.dialect.name == "postgresql":
        sql = sql.replace("?", "%s")
    return raw.cursor(), sql


def fetch(conn: Connection, sql: str, params: tuple[Any, ...]) -> list[Any]:
    """The rows ``sql`` answers for ``params``."""
    cur, sql = _cursor_and_sql(conn, sql)
    try:
        cur.execute(sql, params)
        return list(cur.fetchall())
    finally:
        cur.close()


def executemany(conn: Connection, sql: str, rows: Iterable[Sequence[Any]]) -> None:
    """``sql`` once per row of ``rows``."""
    cur, sql = _cursor_and_sql(conn, sql)
    try:
        cur.executemany(sql, rows)
    finally:
        cur.close()
