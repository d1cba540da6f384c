"""tests/unit/test_ingest.py on PostgreSQL (SQLite: tests/unit; see conftest.py)."""

from tests.unit.test_ingest import *  # noqa: F403
