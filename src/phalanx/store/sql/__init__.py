"""The SQL implementation of the Store (SQLAlchemy 2; SQLite or PostgreSQL)."""

from phalanx.store.sql.store import SqlStore

__all__ = ["SqlStore"]
