"""tests/unit/store/test_accounts.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_accounts import *  # noqa: F403
