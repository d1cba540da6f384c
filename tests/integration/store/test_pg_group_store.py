"""tests/unit/store/test_group_store.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_group_store import *  # noqa: F403
