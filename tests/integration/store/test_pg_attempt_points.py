"""tests/unit/store/test_attempt_points.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_attempt_points import *  # noqa: F403
