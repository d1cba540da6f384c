"""tests/unit/store/test_sql_store.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_sql_store import *  # noqa: F403
