"""tests/unit/store/test_checkpoint_retention.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_checkpoint_retention import *  # noqa: F403
