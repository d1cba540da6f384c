"""tests/unit/store/test_alert_group_finished.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_alert_group_finished import *  # noqa: F403
