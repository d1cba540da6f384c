"""tests/unit/store/test_summary.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_summary import *  # noqa: F403
