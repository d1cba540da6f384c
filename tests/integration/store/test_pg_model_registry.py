"""tests/unit/store/test_model_registry.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_model_registry import *  # noqa: F403
