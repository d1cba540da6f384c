"""tests/unit/store/test_stragglers_stalled.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_stragglers_stalled import *  # noqa: F403
