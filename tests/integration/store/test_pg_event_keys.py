"""tests/unit/store/test_event_keys.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_event_keys import *  # noqa: F403
