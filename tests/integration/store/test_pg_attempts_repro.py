"""tests/unit/store/test_attempts_repro.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_attempts_repro import *  # noqa: F403
