"""tests/unit/store/test_alert_outbox.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_alert_outbox import *  # noqa: F403
