"""tests/unit/store/test_alert_stalled.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_alert_stalled import *  # noqa: F403
