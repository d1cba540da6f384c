"""tests/unit/store/test_migrations.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_migrations import *  # noqa: F403
