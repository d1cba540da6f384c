"""tests/unit/store/test_scalar_chunks.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.store.test_scalar_chunks import *  # noqa: F403
