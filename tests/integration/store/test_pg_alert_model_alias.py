"""tests/unit/store/test_alert_model_alias.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_alert_model_alias import *  # noqa: F403
